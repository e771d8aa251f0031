package main

// The kinds asked of the API server's discovery: the CRDs whose informers
// the scheduler starts where they are served (coscheduling's PodGroups,
// Kueue's queues). A kind not served at start is asked for again every
// --rediscover until it is: a CRD installed after the scheduler, or
// established but not yet in the discovery document when it started.

import (
	"context"
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

// informed: at start (later false), the informers' syncs join those the
// scheduler waits for before its first cycle; later, they are waited for
// here. Whether they synced (false: stopping).
func (s *scheduler) informed(ctx context.Context, later bool, synced ...cache.InformerSynced) bool {
	if !later {
		s.synced = append(s.synced, synced...)
		return true
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// rediscover calls look every `every` (0: never) until it answers true or
// ctx ends.
func rediscover(ctx context.Context, every time.Duration, look func() bool) {
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
			if look() {
				return
			}
		}
	}()
}
