package main

import (
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// eventSink: the Events recorder's sink, watched so that a stopping
// scheduler can wait for the Events of its last bindings. client-go's
// broadcaster writes them from a goroutine of its own, after the Binding;
// a replica stopped by SIGTERM (a rolling update) ended before they were
// written and its last pods had no Scheduled event
// (KubernetesLive.ChartInstallAndUpgrade).
type eventSink struct {
	record.EventSink
	busy atomic.Int64 // writes in progress
	last atomic.Int64 // unix nanos: the last write's start or end
}

func (s *eventSink) track() func() {
	s.busy.Add(1)
	s.last.Store(time.Now().UnixNano())
	return func() {
		s.last.Store(time.Now().UnixNano())
		s.busy.Add(-1)
	}
}

func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	defer s.track()()
	return s.EventSink.Create(e)
}

func (s *eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	defer s.track()()
	return s.EventSink.Update(e)
}

func (s *eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	defer s.track()()
	return s.EventSink.Patch(e, data)
}

// flush stops the broadcaster, which hands every queued Event to the
// sink's goroutine, then waits until that goroutine has been idle for
// `quiet` (the queue drained), `limit` at most.
func (s *eventSink) flush(b record.EventBroadcaster, quiet, limit time.Duration) {
	start := time.Now()
	b.Shutdown()
	for time.Since(start) < limit {
		idle := time.Since(time.Unix(0, s.last.Load()))
		if s.busy.Load() == 0 && idle >= quiet && time.Since(start) >= quiet {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
