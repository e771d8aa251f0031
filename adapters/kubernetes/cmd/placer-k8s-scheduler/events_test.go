package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
)

// slowSink: the API server's Events, each write taking `per`.
type slowSink struct {
	per     time.Duration
	mu      sync.Mutex
	created map[string]int // by the involved object's name
}

func (s *slowSink) Create(e *corev1.Event) (*corev1.Event, error) {
	time.Sleep(s.per)
	s.mu.Lock()
	s.created[e.InvolvedObject.Name]++
	s.mu.Unlock()
	return e, nil
}
func (s *slowSink) Update(e *corev1.Event) (*corev1.Event, error) { return e, nil }
func (s *slowSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return e, nil
}

// A stopping replica's last Events all reach the API server, however far
// behind the broadcaster's goroutine is: client-go's Shutdown cancels that
// goroutine as it hands over the queue, and a queued Event then went or
// not by a select's coin (KubernetesLive.ChartInstallAndUpgrade, under
// load: a pod bound 75 ms before the old replica ended, no Scheduled
// Event). The flush now waits for a marker queued behind them first.
func TestFlushWritesEveryQueuedEvent(t *testing.T) {
	for round := 0; round < 5; round++ {
		api := &slowSink{per: time.Millisecond, created: map[string]int{}}
		sink := newEventSink(api)
		b := record.NewBroadcaster()
		b.StartRecordingToSink(sink)
		rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "placer"})
		const n = 40
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("pod-%d-%d", round, i)
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
			rec.Eventf(p, corev1.EventTypeNormal, "Scheduled", "Successfully assigned ns/%s to node-1", name)
		}
		start := time.Now()
		sink.flush(b, rec, 10*time.Second)
		api.mu.Lock()
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("pod-%d-%d", round, i)
			if api.created[name] != 1 {
				t.Errorf("round %d: %s has %d Events, want 1", round, name, api.created[name])
			}
		}
		if len(api.created) != n {
			t.Errorf("round %d: %d objects with Events, want %d (the marker is not written)", round, len(api.created), n)
		}
		api.mu.Unlock()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("round %d: the flush took %v for %d writes of 1 ms", round, took, n)
		}
	}
}

// Where the sink never answers, the flush gives up at its limit.
func TestFlushEndsAtItsLimit(t *testing.T) {
	api := &slowSink{per: time.Hour, created: map[string]int{}}
	sink := newEventSink(api)
	b := record.NewBroadcaster()
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "placer"})
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: "ns", UID: "uid-stuck"}}
	rec.Event(p, corev1.EventTypeNormal, "Scheduled", "Successfully assigned ns/stuck to node-1")
	start := time.Now()
	sink.flush(b, rec, 300*time.Millisecond)
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the flush took %v, want its limit of 300ms", took)
	}
}
