package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// servedLater: a clientset whose discovery serves only the group versions
// turned on (on), as an API server restarted with more APIs on would.
type servedLater struct {
	kubernetes.Interface
	disc *gatedDiscovery
}

func (c servedLater) Discovery() discovery.DiscoveryInterfaces { return c.disc }

// IsWatchListSemanticsUnSupported: the fake clientset's answer (its
// informers list, then watch), not hidden by the wrapper.
func (c servedLater) IsWatchListSemanticsUnSupported() bool { return true }

type gatedDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu    sync.Mutex
	lists map[string]*metav1.APIResourceList
	asked int
}

func (d *gatedDiscovery) on(gv string, resources ...string) {
	l := &metav1.APIResourceList{GroupVersion: gv}
	for _, r := range resources {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: r})
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lists[gv] = l
}

func (d *gatedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked++
	if l, ok := d.lists[gv]; ok {
		return l, nil
	}
	return nil, &notServed{gv}
}

type notServed struct{ gv string }

func (e *notServed) Error() string { return "the server could not find the requested resource " + e.gv }

func gatedScheduler(t *testing.T, cfg config) (*scheduler, *gatedDiscovery, context.Context) {
	t.Helper()
	cs := fake.NewSimpleClientset()
	d := &gatedDiscovery{FakeDiscovery: cs.Discovery().(*fakediscovery.FakeDiscovery), lists: map[string]*metav1.APIResourceList{}}
	s := newScheduler(cfg, servedLater{Interface: cs, disc: d}, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return s, d, ctx
}

// waitPoked: whether the scheduler was poked (a cycle asked for) within 5 s.
func waitPoked(s *scheduler) bool {
	select {
	case <-s.wake:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// With --dra, resource.k8s.io/v1 not served at start: no snapshot, a pod
// with a claim held out of the rounds, saying so, and discovery asked
// again; once served, the devices and claims are read, a cycle is poked,
// and the pod is no longer held for it. Without --dra it is never asked.
func TestDRAReadOnceServed(t *testing.T) {
	s, d, ctx := gatedScheduler(t, config{schedulerName: "placer", bindWorkers: 4, dra: true})
	s.claims.start(ctx, 10*time.Millisecond)
	if s.claims.snapshot() != nil {
		t.Fatal("a DRA snapshot before the API server serves resource.k8s.io/v1")
	}
	p := testPod("claims", "")
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
	if why := s.volumeHold(s.claims.snapshot(), p); why == "" || !strings.Contains(why, draNotServed) {
		t.Fatalf("a pod with claims, DRA not served: held for %q", why)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.mu.Lock()
		asked := d.asked
		d.mu.Unlock()
		if asked >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("discovery asked %d times in 5 s, every 10 ms wanted", asked)
		}
	}
	d.on("resource.k8s.io/v1", "resourceclaims", "resourceslices", "deviceclasses")
	if !waitPoked(s) {
		t.Fatal("no cycle poked once resource.k8s.io/v1 is served")
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.claims.snapshot() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ds := s.claims.snapshot()
	if ds == nil {
		t.Fatal("no DRA snapshot once resource.k8s.io/v1 is served")
	}
	if why := s.volumeHold(ds, p); why != "" {
		t.Errorf("a pod with claims, DRA served: still held (%q)", why)
	}

	off, od, octx := gatedScheduler(t, config{schedulerName: "placer", bindWorkers: 4})
	off.claims.start(octx, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	od.mu.Lock()
	defer od.mu.Unlock()
	if od.asked != 0 || off.claims.snapshot() != nil {
		t.Errorf("--dra off: discovery asked %d times, snapshot %v", od.asked, off.claims.snapshot())
	}
}

// The native PodGroups (scheduling.k8s.io/v1beta1) not served at start:
// a pod naming one waits, saying so; once served, they are read and a
// cycle is poked.
func TestNativePodGroupsReadOnceServed(t *testing.T) {
	s, d, ctx := gatedScheduler(t, config{schedulerName: "placer", bindWorkers: 4})
	s.groups.start(ctx, 10*time.Millisecond)
	if g := s.groups.group("schedulinggroup/ns/pg", nil); !strings.Contains(g.Wait, nativeNotServed) {
		t.Fatalf("native PodGroups not served: the group's wait is %q", g.Wait)
	}
	d.on("scheduling.k8s.io/v1beta1", "podgroups")
	if !waitPoked(s) {
		t.Fatal("no cycle poked once the native PodGroups are served")
	}
	if g := s.groups.group("schedulinggroup/ns/pg", nil); g.Wait != "waiting for "+g.Name+" to exist" {
		t.Errorf("native PodGroups served, PodGroup ns/pg absent: the group's wait is %q", g.Wait)
	}
}
