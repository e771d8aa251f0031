package main

// The kinds asked of the API server's discovery, whose informers the
// scheduler starts where they are served: coscheduling's PodGroups and
// Kueue's queues (CRDs), the native PodGroups and, with --dra,
// resource.k8s.io/v1. A kind not served at start is asked for again every
// --rediscover until it is: a CRD installed after the scheduler, or
// established but not yet in the discovery document when it started; an
// API server restarted with an API on.

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/client-go/tools/cache"
)

// served: the resources the API server serves in group version gv (nil:
// none, or discovery failed).
func (s *scheduler) served(gv string) map[string]bool {
	l, err := s.cs.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		return nil
	}
	have := map[string]bool{}
	for _, r := range l.APIResources {
		have[r.Name] = true
	}
	return have
}

// kept: the informers of a kind found served have started (synced:
// theirs). At start (later false) their syncs join those the scheduler
// waits for before its first cycle; later, they are waited for here, and
// then the pods that failed are tried again (requeue). keep stores their
// listers, and the log says what is read (read, args; late=later). True:
// the kind is served, stopping or not.
func (s *scheduler) kept(ctx context.Context, later bool, keep func(), read string, args []any,
	synced ...cache.InformerSynced) bool {
	if !later {
		s.synced = append(s.synced, synced...)
	} else if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return true // stopping
	}
	keep()
	slog.Info(read, append(args, "late", later)...)
	if later {
		s.requeue() // the pods that failed waiting for the kind
	}
	return true
}

// discover: look(ctx, false) at start; where the kind is not served, the
// log says so (notServed) and look(ctx, true) is called every `every`
// (0: never) until it answers true or ctx ends.
func discover(ctx context.Context, every time.Duration, notServed string, look func(ctx context.Context, later bool) bool) {
	if look(ctx, false) {
		return
	}
	slog.Info(notServed, "again_every", every)
	if every <= 0 {
		return
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if look(ctx, true) {
				return
			}
		}
	}()
}
