package main

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// eventSink: the Events recorder's sink, which a stopping scheduler
// flushes so that its last bindings keep their Events. client-go's
// broadcaster writes them from a goroutine of its own, after the Binding;
// a replica stopped by SIGTERM (a rolling update) ended before they were
// written and its last pods had no Scheduled event
// (KubernetesLive.ChartInstallAndUpgrade).
type eventSink struct {
	record.EventSink
	flushed chan struct{} // closed when the flush's marker reaches the sink
	once    sync.Once
}

func newEventSink(api record.EventSink) *eventSink {
	return &eventSink{EventSink: api, flushed: make(chan struct{})}
}

// flushUID: the marker Event's object, never written.
const flushUID = types.UID("placer-k8s-scheduler-flush")

func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if e.InvolvedObject.UID == flushUID {
		s.once.Do(func() { close(s.flushed) })
		return e, nil
	}
	return s.EventSink.Create(e)
}

// flush writes every Event recorded so far, then stops the broadcaster;
// `limit` at most. A marker Event is recorded behind them: the
// broadcaster hands Events to the sink one at a time, in order, so when
// the marker arrives every one before it has been written (or given up).
// Only then does it shut down: client-go's Shutdown cancels the sink's
// goroutine as it hands over what is queued, and that goroutine then takes
// a queued Event or its cancellation by chance (a select), so Events
// still queued were dropped, most of them (TestFlushWritesEveryQueuedEvent:
// 0-4 of 40 written before this).
func (s *eventSink) flush(b record.EventBroadcaster, rec record.EventRecorder, limit time.Duration) {
	marker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "placer-k8s-scheduler-flush", UID: flushUID}}
	rec.Event(marker, corev1.EventTypeNormal, "Flush", "the Events before this one are written")
	select {
	case <-s.flushed:
	case <-time.After(limit):
	}
	b.Shutdown()
}
