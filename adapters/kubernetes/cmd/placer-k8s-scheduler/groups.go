package main

// Pod groups: coscheduling's PodGroup (scheduling.x-k8s.io/v1alpha1, a
// CRD, read through a dynamic informer) and the native PodGroup
// (scheduling.k8s.io/v1beta1, the Workload API, a typed informer), each
// read once the API server serves it (asked at start, then every
// --rediscover until it does, discover.go: a CRD installed, or an API
// server restarted with the Workload API on, after the scheduler): what a
// cycle needs of them (plan.Group), and their status, written by this
// scheduler.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	schedlisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"

	"placer.local/kubernetes/internal/plan"
	"placer.local/kubernetes/internal/translate"
)

var podGroupGVR = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

const nativeNotServed = "the API server does not serve scheduling.k8s.io/v1beta1 podgroups (feature gate GenericWorkload, runtime-config scheduling.k8s.io/v1beta1)"

type podGroups struct {
	s      *scheduler
	co     atomic.Pointer[coLister]     // nil: the CRD is not read (yet)
	native atomic.Pointer[nativeLister] // nil: the native kind is not read (yet)

	mu      sync.Mutex
	since   map[string]time.Time // a group's first failed attempt since it was last placed
	why     map[string]string    // its last failure
	timeout map[string]bool      // told of its scheduleTimeoutSeconds
}

func newPodGroups(s *scheduler) *podGroups {
	return &podGroups{s: s, since: map[string]time.Time{}, why: map[string]string{}, timeout: map[string]bool{}}
}

// coLister: coscheduling's PodGroups, their informer synced.
type coLister struct{ cache.GenericLister }

// nativeLister: the native PodGroups, their informer synced.
type nativeLister struct{ schedlisters.PodGroupLister }

// start: the informers of the PodGroup kinds the API server serves; a kind
// not served is asked for again every `every` (0: never) until it is.
func (g *podGroups) start(ctx context.Context, every time.Duration) {
	discover(ctx, every, "scheduling.x-k8s.io/v1alpha1 podgroups not served: a pod group's minMember is its pods' annotation "+
		translate.MinMemberAnnot+", else the pods present", g.lookCo)
	discover(ctx, every, nativeNotServed+": a pod naming a PodGroup in spec.schedulingGroup waits, saying so", g.lookNative)
}

// lookNative: whether the native PodGroups are served; if they are, their
// informer is started and its lister kept (scheduler.kept).
func (g *podGroups) lookNative(ctx context.Context, later bool) bool {
	s := g.s
	if !s.served("scheduling.k8s.io/v1beta1")["podgroups"] {
		return false
	}
	f := informers.NewSharedInformerFactory(s.cs, 0)
	pi := f.Scheduling().V1beta1().PodGroups()
	_, _ = pi.Informer().AddEventHandler(s.requeueOn(changedAs(func(x, y *schedulingv1beta1.PodGroup) bool { return x.Generation != y.Generation })))
	f.Start(ctx.Done())
	return s.kept(ctx, later, func() { g.native.Store(&nativeLister{pi.Lister()}) },
		"scheduling.k8s.io/v1beta1 podgroups read: a pod naming one in spec.schedulingGroup follows its policy", nil,
		pi.Informer().HasSynced)
}

// lookCo: whether coscheduling's PodGroups are served; if they are, their
// informer is started and its lister kept (scheduler.kept).
func (g *podGroups) lookCo(ctx context.Context, later bool) bool {
	s := g.s
	if !s.served(podGroupGVR.GroupVersion().String())["podgroups"] {
		return false
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(s.dyn, 0)
	gi := f.ForResource(podGroupGVR)
	_, _ = gi.Informer().AddEventHandler(s.requeueOn(func(a, b any) bool { return specOf(a) != specOf(b) }))
	f.Start(ctx.Done())
	return s.kept(ctx, later, func() { g.co.Store(&coLister{gi.Lister()}) },
		"scheduling.x-k8s.io/v1alpha1 podgroups read: a pod group's minMember is its PodGroup's", nil, gi.Informer().HasSynced)
}

func specOf(o any) string {
	if u, ok := o.(*unstructured.Unstructured); ok {
		b, _ := json.Marshal(u.Object["spec"])
		return string(b)
	}
	return ""
}

func splitKey(key string) (kind, ns, name string) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 {
		return "", "", ""
	}
	return parts[0], parts[1], parts[2]
}

// coscheduling: the PodGroup of a coscheduling key (nil: none, or not served).
func (g *podGroups) coscheduling(ns, name string) *unstructured.Unstructured {
	co := g.co.Load()
	if co == nil {
		return nil
	}
	o, err := co.ByNamespace(ns).Get(name)
	if err != nil {
		return nil
	}
	u, _ := o.(*unstructured.Unstructured)
	return u
}

// group: plan.Input.Group.
func (g *podGroups) group(key string, pods []*corev1.Pod) plan.Group {
	kind, ns, name := splitKey(key)
	switch kind {
	case "podgroup":
		out := plan.Group{Gang: true, Name: "pod group " + name, MinName: "minMember"}
		if u := g.coscheduling(ns, name); u != nil {
			if m, found, _ := unstructured.NestedInt64(u.Object, "spec", "minMember"); found {
				out.Min = int(m)
			}
			return out
		}
		if len(pods) > 0 {
			if v, has := pods[0].Annotations[translate.MinMemberAnnot]; has {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					out.Err = fmt.Sprintf("pod group %s: annotation %s=%q is not a positive count", name, translate.MinMemberAnnot, v)
				}
				out.Min = n
			}
		}
		return out
	case "schedulinggroup":
		out := plan.Group{Gang: true, Name: "PodGroup " + ns + "/" + name + " (scheduling.k8s.io/v1beta1)", MinName: "gang minCount"}
		native := g.native.Load()
		if native == nil {
			out.Wait = "waiting for " + out.Name + ": " + nativeNotServed
			return out
		}
		pg, err := native.PodGroups(ns).Get(name)
		if err != nil {
			out.Wait = "waiting for " + out.Name + " to exist"
			return out
		}
		if gp := pg.Spec.SchedulingPolicy.Gang; gp != nil {
			out.Min = int(gp.MinCount)
		} else {
			out.Gang = false
		}
		if c := pg.Spec.SchedulingConstraints; c != nil {
			labels := g.s.cfg.topology
			for _, t := range c.Topology { // several: the finest (its domain is in the others')
				l := translate.Level(labels, t.Key)
				if l == 0 {
					out.Err = fmt.Sprintf("%s: topology key %q (only a --rack-label level: %q)", out.Name, t.Key, labels)
				} else if l > translate.Level(labels, out.Within) {
					out.Within = t.Key
				}
			}
		}
		return out
	}
	return plan.Group{Gang: true, Name: key, MinName: "minMember"}
}

// tried: a cycle's outcome for the pod groups it tried ("" = placed).
func (g *podGroups) tried(out map[string]string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, why := range out {
		if why == "" {
			delete(g.since, k)
			delete(g.why, k)
			delete(g.timeout, k)
			continue
		}
		if _, ok := g.since[k]; !ok {
			g.since[k] = now
		}
		g.why[k] = why
	}
}

// timedOut: a failed pod's message once its coscheduling group has waited
// past its scheduleTimeoutSeconds since its first attempt: the group gave
// up that attempt, and is tried again (as coscheduling's Permit rejects the
// members that waited and the group backs off). A Warning Event on the
// PodGroup says so once.
func (g *podGroups) timedOut(f plan.Failure, now time.Time, why string) string {
	kind, ns, name := splitKey(f.Group)
	if kind != "podgroup" {
		return why
	}
	u := g.coscheduling(ns, name)
	if u == nil {
		return why
	}
	t, found, _ := unstructured.NestedInt64(u.Object, "spec", "scheduleTimeoutSeconds")
	if !found || t <= 0 {
		return why
	}
	g.mu.Lock()
	since, ok := g.since[f.Group]
	if !ok {
		since = now
		g.since[f.Group] = now
	}
	first := false
	late := now.Sub(since) >= time.Duration(t)*time.Second
	if late && !g.timeout[f.Group] {
		g.timeout[f.Group], first = true, true
	}
	g.mu.Unlock()
	if !late {
		return why
	}
	msg := fmt.Sprintf("placer: pod group %s was not scheduled within its scheduleTimeoutSeconds (%d s, since %s); its pods wait and are tried again: %s",
		name, t, since.UTC().Format(time.RFC3339), strings.TrimPrefix(why, "placer: "))
	if first {
		g.s.recorder.Event(u, corev1.EventTypeWarning, "ScheduleTimeout", msg)
	}
	return msg
}

type groupCount struct {
	pods, scheduled, running, succeeded, failed int
	ns, name                                    string
}

// sync writes each PodGroup's status where it changed: coscheduling's
// phase (Pending: fewer than minMember scheduled; Scheduling: minMember
// scheduled, fewer running; Running; Finished: minMember succeeded;
// Failed: a member failed; Unknown: some scheduled, fewer than minMember),
// its scheduled, running, succeeded and failed counts and its
// scheduleStartTime; the native PodGroup's condition
// PodGroupInitiallyScheduled (True once minCount pods are scheduled, for
// good; else False, Unschedulable, with the reason).
func (g *podGroups) sync(ctx context.Context) {
	if g.co.Load() == nil && g.native.Load() == nil {
		return
	}
	all, _ := g.s.pods.List(labels.Everything())
	counts := map[string]*groupCount{}
	for _, p := range all {
		k := translate.GroupKey(p)
		if k == "" {
			continue
		}
		c := counts[k]
		if c == nil {
			_, ns, name := splitKey(k)
			c = &groupCount{ns: ns, name: name}
			counts[k] = c
		}
		c.pods++
		if p.Spec.NodeName != "" {
			c.scheduled++
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			c.running++
		case corev1.PodSucceeded:
			c.succeeded++
		case corev1.PodFailed:
			c.failed++
		}
	}
	g.mu.Lock()
	assumedBy := map[string]int{}
	g.s.mu.Lock()
	for _, a := range g.s.assumed {
		if k := translate.GroupKey(a.pod); k != "" {
			assumedBy[k]++
		}
	}
	g.s.mu.Unlock()
	since := map[string]time.Time{}
	why := map[string]string{}
	for k, v := range g.since {
		since[k] = v
	}
	for k, v := range g.why {
		why[k] = v
	}
	g.mu.Unlock()
	for k, c := range counts {
		c.scheduled = min(c.pods, c.scheduled+assumedBy[k])
		kind, _, _ := splitKey(k)
		switch kind {
		case "podgroup":
			g.syncCoscheduling(ctx, k, c, since[k])
		case "schedulinggroup":
			g.syncNative(ctx, c, why[k])
		}
	}
}

func (g *podGroups) syncCoscheduling(ctx context.Context, key string, c *groupCount, since time.Time) {
	u := g.coscheduling(c.ns, c.name)
	if u == nil {
		return
	}
	min := int(c.pods)
	if m, found, _ := unstructured.NestedInt64(u.Object, "spec", "minMember"); found && m > 0 {
		min = int(m)
	}
	phase := "Pending"
	switch {
	case c.succeeded >= min:
		phase = "Finished"
	case c.failed > 0:
		phase = "Failed"
	case c.running >= min:
		phase = "Running"
	case c.scheduled >= min:
		phase = "Scheduling"
	case c.scheduled > 0:
		phase = "Unknown"
	}
	want := map[string]any{"phase": phase, "scheduled": int64(c.scheduled), "running": int64(c.running),
		"succeeded": int64(c.succeeded), "failed": int64(c.failed)}
	have, _, _ := unstructured.NestedMap(u.Object, "status")
	if t, ok := have["scheduleStartTime"].(string); ok && t != "" {
		want["scheduleStartTime"] = t
	} else if !since.IsZero() {
		want["scheduleStartTime"] = since.UTC().Format(time.RFC3339)
	}
	same := true
	for k, v := range want {
		if fmt.Sprint(have[k]) != fmt.Sprint(v) {
			same = false
		}
	}
	if same {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": want})
	_, err := g.s.dyn.Resource(podGroupGVR).Namespace(c.ns).Patch(ctx, c.name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		slog.Warn("writing a PodGroup's status", "podgroup", key, "err", err)
	}
}

func (g *podGroups) syncNative(ctx context.Context, c *groupCount, why string) {
	native := g.native.Load()
	if native == nil {
		return
	}
	pg, err := native.PodGroups(c.ns).Get(c.name)
	if err != nil {
		return
	}
	min := c.pods
	if gp := pg.Spec.SchedulingPolicy.Gang; gp != nil {
		min = int(gp.MinCount)
	}
	cond := metav1.Condition{Type: schedulingv1beta1.PodGroupInitiallyScheduled, ObservedGeneration: pg.Generation}
	switch {
	case c.scheduled >= min:
		cond.Status, cond.Reason = metav1.ConditionTrue, "Scheduled"
		cond.Message = fmt.Sprintf("%d of its %d pods scheduled (gang minCount %d)", c.scheduled, c.pods, min)
	case why != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable, why
	default:
		return
	}
	for _, have := range pg.Status.Conditions {
		if have.Type != cond.Type {
			continue
		}
		if have.Status == metav1.ConditionTrue { // terminal
			return
		}
		if have.Status == cond.Status && have.Reason == cond.Reason && have.Message == cond.Message {
			return
		}
		if have.Status == cond.Status {
			cond.LastTransitionTime = have.LastTransitionTime
		}
	}
	if cond.LastTransitionTime.IsZero() {
		cond.LastTransitionTime = metav1.Now()
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []metav1.Condition{cond}}})
	_, err = g.s.cs.SchedulingV1beta1().PodGroups(c.ns).Patch(ctx, c.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		slog.Warn("writing a PodGroup's condition", "podgroup", c.ns+"/"+c.name, "err", err)
	}
}
