package translate

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// holding: what a bound pod holds on its node in the round: the node's
// index, the GPU indices the round gives it (Kubernetes does not say which
// of a node's GPUs a pod has; a share's is its placer.io/gpu-index) and
// whether all it asks sits inside what the node reports as used, so that
// stopping it gives back no more than the node has (Placer refuses a round
// where a running job does not).
type holding struct {
	node  int
	gpus  []uint8
	milli uint16
	ok    bool
}

// OlderFirst: whether pod a was created before b (then by name).
func OlderFirst(a, b *corev1.Pod) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// MirrorAnnot marks a static pod's mirror, which the API cannot evict.
const MirrorAnnot = "kubernetes.io/config.mirror"

// notVictim says why a bound pod is never a victim ("" = it may be).
func notVictim(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "terminating"
	case p.Annotations[MirrorAnnot] != "":
		return "a static pod's mirror"
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return "a DaemonSet's pod (it would come back on the same node)"
	}
	return ""
}

func startOf(p *corev1.Pod) int64 {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Unix()
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Unix()
		}
	}
	return p.CreationTimestamp.Unix()
}

// running adds, with Options.Evict, the bound pods that a pending job may
// preempt as running jobs: those of a lower priority than the round's
// highest pending priority (Placer preempts only strictly lower ones), each
// pod a job of one replica, a pod group's bound members one gang job (all
// or none of them stopped). A pod that is terminating, a static pod's
// mirror, a DaemonSet's, one that NotEvictable names, or one whose requests
// do not sit inside its node's use is left out: its use stays in its node,
// and it is never a victim. So is a group with such a member, or whose
// members differ. With a queue tree (Options.Kueue), the bound pods of a
// queue that are no victims are its use (held).
func (r *Round) running(now int64) {
	var bound []*corev1.Pod
	for _, on := range r.C.on {
		bound = append(bound, on...)
	}
	holds := r.C.holds
	top := int32(-1 << 31)
	for _, j := range r.Request.Pending {
		top = max(top, j.Priority)
	}
	type grp struct {
		key  string
		gang bool
		pods []*corev1.Pod
		why  string
	}
	groups := map[string]*grp{}
	var order []string
	for _, p := range bound {
		key, gang := "pod/"+p.Namespace+"/"+p.Name, false
		if k := GroupKey(p); k != "" {
			key, gang = k, true
		}
		g := groups[key]
		if g == nil {
			g = &grp{key: key, gang: gang}
			groups[key] = g
			order = append(order, key)
		}
		g.pods = append(g.pods, p)
		if g.why != "" {
			continue
		}
		h := holds[p]
		switch {
		case notVictim(p) != "":
			g.why = notVictim(p)
		case r.opt.NotEvictable != nil && r.opt.NotEvictable(p) != "":
			g.why = r.opt.NotEvictable(p)
		case h == nil || !h.ok:
			g.why = "its requests are not inside its node's use"
		}
	}
	sort.Strings(order)
	r.Running = map[string][]*corev1.Pod{}
	for _, key := range order {
		g := groups[key]
		sort.Slice(g.pods, func(i, j int) bool { return g.pods[i].Name < g.pods[j].Name })
		if r.opt.Evict && g.why == "" && r.victim(key, g.pods, top, now) {
			continue
		}
		if len(r.Request.Queues) > 0 {
			r.held(g.pods, now)
		}
	}
}

// podDemand: what one replica of pod p holds in a round.
func podDemand(p *corev1.Pod) *wire.DemandT {
	rl := Requests(p)
	d := &wire.DemandT{Gpus: uint16(gpus(rl)), GpuMilli: 1000, CpuMilli: milli(rl[corev1.ResourceCPU]), MemoryMib: mib(rl[corev1.ResourceMemory])}
	if m, _ := Share(p); m > 0 {
		d.Gpus, d.GpuMilli = 1, uint16(m)
	}
	return d
}

// victim adds group `pods` (sorted by name) as a preemptible running job
// when its pods are alike and of a lower priority than `top`.
func (r *Round) victim(key string, pods []*corev1.Pod, top int32, now int64) bool {
	first := pods[0]
	if Priority(first) >= top {
		return false
	}
	d := podDemand(first)
	rj := &wire.RunningJobT{Name: "running/" + key, Kind: wire.JobKindBatch, Priority: Priority(first), Demand: d,
		Gang: len(pods) > 1, Preemptible: true, StartTime: startOf(first), Queue: r.queue(first)}
	for _, p := range pods {
		dp, h := podDemand(p), r.C.holds[p]
		if Priority(p) != rj.Priority || *dp != *d {
			return false
		}
		rj.StartTime = min(rj.StartTime, startOf(p))
		rj.Replicas = append(rj.Replicas, &wire.ReplicaPlacementT{Node: uint32(h.node), Gpus: h.gpus, GpuMilli: h.milli})
	}
	rj.StartTime = min(rj.StartTime, now)
	r.Request.Running = append(r.Request.Running, rj)
	r.Running[rj.Name] = pods
	return true
}

// held: the use of bound pods that are no victims, in the queue tree
// (Options.Kueue): each pod of a queue a running job that is not
// preemptible, or, where its holding cannot be one (its requests are not
// inside its node's use), its queue's and the queue's ancestors' limits
// and guarantees lowered by what it holds.
func (r *Round) held(pods []*corev1.Pod, now int64) {
	for _, p := range pods {
		q := r.queue(p)
		if q == "" {
			continue
		}
		d, h := podDemand(p), r.C.holds[p]
		if h == nil || !h.ok {
			r.lower(q, int64(d.Gpus)*int64(d.GpuMilli), d.CpuMilli)
			continue
		}
		r.Request.Running = append(r.Request.Running, &wire.RunningJobT{Name: "held/" + p.Namespace + "/" + p.Name,
			Kind: wire.JobKindBatch, Priority: Priority(p), Demand: d, StartTime: min(startOf(p), now), Queue: q,
			Replicas: []*wire.ReplicaPlacementT{{Node: uint32(h.node), Gpus: h.gpus, GpuMilli: h.milli}}})
	}
}

// lower takes gpu and cpu milli-units off queue q's and its ancestors'
// limits and guarantees (none below 0, no guarantee above its limit).
func (r *Round) lower(q string, gpu, cpu int64) {
	byName := make(map[string]*wire.QueueT, len(r.Request.Queues))
	for _, x := range r.Request.Queues {
		byName[x.Name] = x
	}
	for x := byName[q]; x != nil; x = byName[x.Parent] {
		x.GpuMilliGuarantee = max(0, x.GpuMilliGuarantee-gpu)
		x.CpuMilliGuarantee = max(0, x.CpuMilliGuarantee-cpu)
		if x.GpuMilliLimit >= 0 {
			x.GpuMilliLimit = max(0, x.GpuMilliLimit-gpu)
			x.GpuMilliGuarantee = min(x.GpuMilliGuarantee, x.GpuMilliLimit)
		}
		if x.CpuMilliLimit >= 0 {
			x.CpuMilliLimit = max(0, x.CpuMilliLimit-cpu)
			x.CpuMilliGuarantee = min(x.CpuMilliGuarantee, x.CpuMilliLimit)
		}
	}
}

// Victims: the pods of Placer's preemptions, by the pending job each is
// for (-1: none named), in the reply's order; preemptions of jobs the
// round did not send are left out.
func (r *Round) Victims(ps []*wire.PreemptionT) map[int][]*corev1.Pod {
	out := map[int][]*corev1.Pod{}
	for _, p := range ps {
		pods, ok := r.Running[p.Job]
		if !ok {
			continue
		}
		j := int(p.ForJob)
		if p.ForJob == 0xFFFFFFFF || j >= len(r.Units) {
			j = -1
		}
		out[j] = append(out[j], pods...)
	}
	return out
}

// VictimSummary names victims for a message: "ns/a on node-1, ns/b on node-2".
func VictimSummary(ps []*corev1.Pod) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		if i == 4 && len(ps) > 5 {
			return s + fmt.Sprintf("and %d more", len(ps)-4)
		}
		s += p.Namespace + "/" + p.Name + " on " + p.Spec.NodeName
	}
	return s
}
