package main

// Dynamic resource allocation (resource.k8s.io/v1, once the API server
// serves it: asked at start, then every --rediscover until it does, an
// API server restarted with it on after the scheduler): informers over
// ResourceSlices, DeviceClasses and ResourceClaims; each cycle's
// dra.Snapshot (internal/dra); and, before a
// pod placed with claims is bound, each claim's status written as
// kube-scheduler's DynamicResources plugin writes it in PreBind: the
// finalizer resource.kubernetes.io/delete-protection, then
// status.allocation (a claim this cycle allocated) and the pod in
// status.reservedFor. The resourceclaim controller (kube-controller-manager)
// creates the claims of templates, and once no pod uses a claim clears
// its allocation, which gives its devices back to the next cycle.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/plan"
)

const draNotServed = "the API server does not serve resource.k8s.io/v1 (dynamic resource allocation)"

type claims struct {
	s       *scheduler
	live    atomic.Pointer[draListers] // nil: DRA off (--dra off, or not served yet)
	cel     *cel.Cache
	matches *dra.Matches // devices against selectors, across cycles

	mu      sync.Mutex
	assumed map[types.UID]assumedClaim // written by this scheduler, not yet shown by the informer
}

// draListers: the informers' listers, synced.
type draListers struct {
	slices  resourcelisters.ResourceSliceLister
	classes resourcelisters.DeviceClassLister
	claims  resourcelisters.ResourceClaimLister
}

type assumedClaim struct {
	claim *resourceapi.ResourceClaim
	when  time.Time
}

func newClaims(s *scheduler) *claims {
	return &claims{s: s, cel: dra.NewCache(), matches: dra.NewMatches(), assumed: map[types.UID]assumedClaim{}}
}

// start: with --dra on, the informers once the API server serves
// resource.k8s.io/v1, asked for again every `every` (0: never) until it does.
func (d *claims) start(ctx context.Context, every time.Duration) {
	if !d.s.cfg.dra {
		return
	}
	discover(ctx, every, draNotServed+": pods with ResourceClaims wait, saying so", d.look)
}

// look: whether resource.k8s.io/v1 is served; if it is, the informers are
// started and their listers kept (scheduler.kept).
func (d *claims) look(ctx context.Context, later bool) bool {
	s := d.s
	if !s.served(resourceapi.SchemeGroupVersion.String())["resourceclaims"] {
		return false
	}
	f := informers.NewSharedInformerFactory(s.cs, 0)
	r := f.Resource().V1()
	si, ci, ki := r.ResourceSlices(), r.DeviceClasses(), r.ResourceClaims()
	_, _ = si.Informer().AddEventHandler(s.requeueOn(nil)) // devices published
	_, _ = ci.Informer().AddEventHandler(s.requeueOn(nil)) // a class a claim names
	_, _ = ki.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(a, b any) { d.claimChanged(a, b) },
		DeleteFunc: func(o any) { d.claimChanged(o, nil) },
	})
	f.Start(ctx.Done())
	return s.kept(ctx, later, func() { d.live.Store(&draListers{slices: si.Lister(), classes: ci.Lister(), claims: ki.Lister()}) },
		"dynamic resource allocation on", []any{"gpu_driver", s.cfg.draDriver},
		si.Informer().HasSynced, ci.Informer().HasSynced, ki.Informer().HasSynced)
}

// claimChanged: a claim updated (old to o) or deleted (o nil). Its
// allocation cleared, its reservations fewer, or an allocated claim
// deleted, gives devices or room back: the pods that failed are tried
// again (requeue). Its allocation set, or more reservations (another
// scheduler's doing, or this one's seen), take some: a cycle is poked.
func (d *claims) claimChanged(old, o any) {
	if t, ok := old.(cache.DeletedFinalStateUnknown); ok {
		old = t.Obj
	}
	x, _ := old.(*resourceapi.ResourceClaim)
	y, _ := o.(*resourceapi.ResourceClaim)
	switch {
	case x == nil:
		d.s.poke()
	case y == nil:
		if x.Status.Allocation != nil {
			d.s.requeue()
		} else {
			d.s.poke()
		}
	case x.Status.Allocation != nil && y.Status.Allocation == nil, len(y.Status.ReservedFor) < len(x.Status.ReservedFor):
		d.s.requeue()
	case (x.Status.Allocation == nil) != (y.Status.Allocation == nil), len(x.Status.ReservedFor) != len(y.Status.ReservedFor):
		d.s.poke()
	}
}

// snapshot: the cycle's devices and claims (nil: DRA off), the claims
// written by this scheduler standing in for the informer's older copies.
func (d *claims) snapshot() *dra.Snapshot {
	l := d.live.Load()
	if l == nil {
		return nil
	}
	sl, _ := l.slices.List(labels.Everything())
	cl, _ := l.claims.List(labels.Everything())
	d.mu.Lock()
	for uid, a := range d.assumed {
		if time.Since(a.when) > 2*time.Minute {
			delete(d.assumed, uid)
		}
	}
	for i, c := range cl {
		a, ok := d.assumed[c.UID]
		if !ok {
			continue
		}
		if newer(c.ResourceVersion, a.claim.ResourceVersion) {
			delete(d.assumed, c.UID)
			continue
		}
		cl[i] = a.claim
	}
	d.mu.Unlock()
	return dra.NewSnapshot(dra.Input{Slices: sl, Classes: classLister{l.classes}, Claims: cl, GPUDriver: d.s.cfg.draDriver, Cache: d.cel, Matches: d.matches})
}

// classLister: the informer's DeviceClass lister as the allocator lists them.
type classLister struct {
	l resourcelisters.DeviceClassLister
}

func (c classLister) List() ([]*resourceapi.DeviceClass, error) { return c.l.List(labels.Everything()) }
func (c classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	return c.l.Get(name)
}

// newer: whether resource version a is at least b (both from one API server).
func newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 != nil || err2 != nil || x >= y
}

// phases: the placements in the order their claims can be written: first
// those whose claims need no other pod's write (no claims, allocations
// this cycle made, claims allocated before), then those that share a
// claim another pod of the cycle allocates, once that is written.
func (d *claims) phases(binds []plan.Bind) [][]plan.Bind {
	allocatedHere := map[types.UID]bool{}
	for _, b := range binds {
		if b.Claims == nil {
			continue
		}
		for _, ca := range b.Claims.Claims {
			if ca.Allocation != nil {
				allocatedHere[ca.Claim.UID] = true
			}
		}
	}
	var first, then []plan.Bind
	for _, b := range binds {
		waits := false
		if b.Claims != nil {
			for _, ca := range b.Claims.Claims {
				waits = waits || (ca.Allocation == nil && ca.Claim.Status.Allocation == nil && allocatedHere[ca.Claim.UID])
			}
		}
		if waits {
			then = append(then, b)
		} else {
			first = append(first, b)
		}
	}
	return [][]plan.Bind{first, then}
}

// reserveAll: pod b's claims written, before its Binding (kube-scheduler's
// PreBind); an error: not all could be (the pod is then not bound).
func (d *claims) reserveAll(ctx context.Context, b plan.Bind) error {
	if b.Claims == nil {
		return nil
	}
	for _, ca := range b.Claims.Claims {
		if err := d.reserve(ctx, b.Pod, ca); err != nil {
			return err
		}
	}
	return nil
}

// reserve: one claim of pod p, as kube-scheduler's PreBind writes it
// (bindClaim): with an allocation of this cycle, the finalizer first (an
// update), then status.allocation; and the pod in status.reservedFor; on
// a conflict read again and retried.
func (d *claims) reserve(ctx context.Context, p *corev1.Pod, ca dra.ClaimAlloc) error {
	api := d.s.cs.ResourceV1().ResourceClaims(ca.Claim.Namespace)
	claim := ca.Claim
	d.mu.Lock()
	if a, ok := d.assumed[claim.UID]; ok && newer(a.claim.ResourceVersion, claim.ResourceVersion) {
		claim = a.claim // written since the cycle's snapshot (another pod's allocation of a shared claim)
	}
	d.mu.Unlock()
	claim = claim.DeepCopy()
	if resourceclaim.IsReservedForPod(p, claim, false) {
		return nil // written before (a restarted scheduler's placement)
	}
	ref := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID}
	refresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if refresh {
			c, err := api.Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			claim = c
		}
		refresh = true
		if claim.DeletionTimestamp != nil {
			return fmt.Errorf("claim %s/%s got deleted in the meantime", claim.Namespace, claim.Name)
		}
		if resourceclaim.IsReservedForPod(p, claim, false) {
			return nil
		}
		if ca.Allocation != nil {
			if claim.Status.Allocation != nil {
				return fmt.Errorf("claim %s/%s got allocated elsewhere in the meantime", claim.Namespace, claim.Name)
			}
			if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
				claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
				c, err := api.Update(ctx, claim, metav1.UpdateOptions{})
				if err != nil {
					return fmt.Errorf("add finalizer to claim %s/%s: %w", claim.Namespace, claim.Name, err)
				}
				claim = c
			}
			claim.Status.Allocation = ca.Allocation
		} else if claim.Status.Allocation == nil {
			return fmt.Errorf("claim %s/%s got deallocated in the meantime", claim.Namespace, claim.Name)
		}
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, ref)
		c, err := api.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		claim = c
		return nil
	})
	if err != nil {
		return err
	}
	mClaims.Inc()
	d.mu.Lock()
	d.assumed[claim.UID] = assumedClaim{claim: claim, when: time.Now()}
	d.mu.Unlock()
	return nil
}

// resolve: why pod p waits for its claims before any round ("" = it
// does not), in kube-scheduler's words (its PreEnqueue).
func resolveWait(ds *dra.Snapshot, p *corev1.Pod) string {
	if len(p.Spec.ResourceClaims) == 0 {
		return ""
	}
	if ds == nil {
		return ""
	}
	_, why := ds.Resolve(p)
	return why
}
