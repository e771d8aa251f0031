// Package translate turns Kubernetes nodes and pods into one Placer round
// (schemas/placement.fbs) and Placer's reply into bindings and reasons.
// docs/kubernetes.md lists the mapping field by field.
package translate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

const (
	GPUResource    = corev1.ResourceName("nvidia.com/gpu")
	GPUProduct     = "nvidia.com/gpu.product"
	PodGroupLabel  = "scheduling.x-k8s.io/pod-group"
	MinMemberAnnot = "scheduling.x-k8s.io/min-member" // fallback when no PodGroup object can be read
	QueueLabel     = "kueue.x-k8s.io/queue-name"
	HostnameKey    = "kubernetes.io/hostname"
	// Fractional GPUs: a pod asks a share of one GPU with this annotation
	// (milli-GPU, 1..999) and no nvidia.com/gpu request; the scheduler
	// writes the GPU index Placer chose in GPUIndexAnnot before binding.
	GPUMilliAnnot = "placer.io/gpu-milli"
	GPUIndexAnnot = "placer.io/gpu-index"
)

// GroupKey is a pod's group: "schedulinggroup/<namespace>/<name>" for
// the native PodGroup its spec.schedulingGroup names (scheduling.k8s.io,
// the Workload API), else "podgroup/<namespace>/<name>" for the
// coscheduling label, or "" for none.
func GroupKey(p *corev1.Pod) string {
	if n := NativeGroupName(p); n != "" {
		return "schedulinggroup/" + p.Namespace + "/" + n
	}
	if pg := p.Labels[PodGroupLabel]; pg != "" {
		return "podgroup/" + p.Namespace + "/" + pg
	}
	return ""
}

// NativeGroupName is the native PodGroup a pod's spec.schedulingGroup names, or "".
func NativeGroupName(p *corev1.Pod) string {
	if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		return *sg.PodGroupName
	}
	return ""
}

// NativeGroup: a native PodGroup (scheduling.k8s.io/v1beta1, the
// Workload API) as the round reads it.
type NativeGroup struct {
	Found    bool     // the PodGroup exists
	Gang     bool     // schedulingPolicy.gang; else basic: its pods are placed one by one
	MinCount int      // schedulingPolicy.gang.minCount
	Topology []string // schedulingConstraints.topology keys
	Err      string   // it could not be read: its pods wait, saying why
}

// groupKey: GroupKey, but "" for the pods of a native PodGroup whose
// policy is basic (no gang: each pod its own job).
func (r *Round) groupKey(p *corev1.Pod) string {
	k := GroupKey(p)
	if n := NativeGroupName(p); n != "" && r.opt.PodGroup != nil {
		if ng := r.opt.PodGroup(p.Namespace, n); ng.Found && !ng.Gang && ng.Err == "" {
			return ""
		}
	}
	return k
}

// Share is a pod's GPU share in milli-GPU (0: none) and whether the annotation is well formed.
func Share(p *corev1.Pod) (int64, bool) {
	v, ok := p.Annotations[GPUMilliAnnot]
	if !ok {
		return 0, true
	}
	m, err := strconv.ParseInt(v, 10, 64)
	if err != nil || m < 1 || m > 999 {
		return 0, false
	}
	return m, true
}

// Options of the translation.
type Options struct {
	RackLabel string // node label whose values are the topology's racks ("" = no topology)
	Stacking  bool   // Policy.stacking, as the Slurm bridge sends it
	// Evict: bound pods of a lower priority than some pending pod go into
	// the round as running work, preemptible, and Placer's preemption is on
	// (the scheduler's --evict). Without it no pod is ever a victim.
	Evict bool
	// NotEvictable says why a bound pod must not be a victim this round
	// ("" = it may be), e.g. its last eviction was refused (a
	// PodDisruptionBudget). Read only with Evict.
	NotEvictable func(*corev1.Pod) string
	// PodGroup reads a native PodGroup (namespace, name), for the pods
	// whose spec.schedulingGroup names one (nil: none is read; such a
	// group is a gang of the pods present).
	PodGroup func(namespace, name string) NativeGroup
	// Wait says why a pending pod is held out of the round ("" = it is
	// not), e.g. the pods evicted for it have not terminated yet. A group
	// with one such pod waits whole (reason Unschedulable).
	Wait func(*corev1.Pod) string
}

// Group is one Placer job: a lone pod, a gang (a pod group), or pods of
// one owner that must sit on distinct nodes.
type Group struct {
	Key          string
	Pods         []*corev1.Pod // replica i is Pods[i]
	Gang         bool
	MinMember    int
	RackRequired bool // a native PodGroup's topology constraint on the rack label
}

// Skipped is a pod that the round leaves out, and why (reported on the pod).
type Skipped struct {
	Pod    *corev1.Pod
	Reason string // "Unschedulable" for pods that wait, "SchedulerError" for what cannot be expressed
	Why    string
}

// Round is a request and what its jobs stand for.
type Round struct {
	opt     Options
	Request *wire.ScheduleRequestT
	Nodes   []*corev1.Node
	Groups  []*Group // job i of Request.Pending is Groups[i]
	Skipped []Skipped
	// Running: with Options.Evict, the pods of each running job of the
	// round by its name (a pod group's bound members together).
	Running map[string][]*corev1.Pod
}

// PodGroupMin says a pod group's minMember (ok=false: unknown).
type PodGroupMin func(namespace, name string) (int, bool)

// Requests is what a pod asks of a node: the sum of its containers, or
// its largest init container where that is more, plus the overhead (as
// kube-scheduler's NodeResourcesFit counts it).
func Requests(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	add := func(rl corev1.ResourceList) {
		for k, v := range rl {
			q := out[k]
			q.Add(v)
			out[k] = q
		}
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		add(effective(c))
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		for k, v := range effective(c) {
			if q, ok := out[k]; !ok || v.Cmp(q) > 0 {
				out[k] = v.DeepCopy()
			}
		}
	}
	add(p.Spec.Overhead)
	return out
}

// effective: requests, or the limits where a request is not given (as
// the API server defaults them).
func effective(c *corev1.Container) corev1.ResourceList {
	rl := corev1.ResourceList{}
	for k, v := range c.Resources.Limits {
		rl[k] = v
	}
	for k, v := range c.Resources.Requests {
		rl[k] = v
	}
	return rl
}

// Bound reports whether a pod holds its node's resources: bound and not finished.
func Bound(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func milli(q resource.Quantity) int64 { return q.MilliValue() }

func mib(q resource.Quantity) int64 {
	b := q.Value()
	return (b + (1<<20 - 1)) >> 20
}

func gpus(rl corev1.ResourceList) int64 {
	q, ok := rl[GPUResource]
	if !ok {
		return 0
	}
	return q.Value()
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Build makes the round: `nodes` as the cluster with what `bound` pods
// (and `assumed` ones, bound by us but not seen yet) use, `pending` as jobs.
func Build(nodes []*corev1.Node, bound []*corev1.Pod, pending []*corev1.Pod, minOf PodGroupMin, opt Options, now int64) *Round {
	r := &Round{opt: opt}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	r.Nodes = nodes
	used := map[string]corev1.ResourceList{}
	podsOn := map[string][]*corev1.Pod{}
	for _, p := range bound {
		rl := used[p.Spec.NodeName]
		if rl == nil {
			rl = corev1.ResourceList{}
			used[p.Spec.NodeName] = rl
		}
		for k, v := range Requests(p) {
			q := rl[k]
			q.Add(v)
			rl[k] = q
		}
		podsOn[p.Spec.NodeName] = append(podsOn[p.Spec.NodeName], p)
	}
	cluster := &wire.ClusterT{Epoch: uint64(now)}
	rackIdx := map[string]int32{}
	var topo *wire.TopologyT
	if opt.RackLabel != "" {
		topo = &wire.TopologyT{LevelNames: []string{"cluster", "rack"},
			Domains: []*wire.TopologyDomainT{{Name: "cluster", Level: 0, Parent: -1}}}
	}
	holds := map[*corev1.Pod]*holding{}
	for ni, n := range nodes {
		alloc := n.Status.Allocatable
		u := used[n.Name]
		g := gpus(alloc)
		free := make([]uint16, g)
		for i := range free {
			free[i] = 1000
		}
		on := podsOn[n.Name]
		sort.SliceStable(on, func(i, j int) bool { return olderFirst(on[i], on[j]) })
		// Shares first, on the GPUs their annotations name; whole GPUs then
		// on the fully free ones (Placer gives whole GPUs only those), each
		// pod its own (Kubernetes does not say which GPUs a pod has: these
		// indices are the round's, consistent with the free list).
		for _, p := range on {
			if m, ok := Share(p); ok && m > 0 {
				if i, err := strconv.Atoi(p.Annotations[GPUIndexAnnot]); err == nil && i >= 0 && i < len(free) {
					h := &holding{node: ni, gpus: []uint8{uint8(i)}, milli: uint16(m), ok: free[i] >= uint16(m)}
					free[i] = uint16(max(0, int64(free[i])-m))
					holds[p] = h
				}
			}
		}
		for _, p := range on {
			k := gpus(Requests(p))
			if k == 0 {
				if m, _ := Share(p); m == 0 {
					holds[p] = &holding{node: ni, milli: 1000, ok: true}
				}
				continue
			}
			h := &holding{node: ni, milli: 1000, ok: true}
			for i := range free {
				if int64(len(h.gpus)) < k && free[i] == 1000 {
					free[i] = 0
					h.gpus = append(h.gpus, uint8(i))
				}
			}
			for i := range free { // more whole GPUs in use than fully free ones: the rest from the partly used
				if int64(len(h.gpus)) < k && free[i] > 0 {
					free[i] = 0
					h.gpus = append(h.gpus, uint8(i))
					h.ok = false // a GPU a share also uses: not this pod's to give back
				}
			}
			h.ok = h.ok && int64(len(h.gpus)) == k
			holds[p] = h
		}
		cpuCap, memCap := milli(alloc[corev1.ResourceCPU]), mib(alloc[corev1.ResourceMemory])
		// CPU and memory: a pod holds its requests while the node's use
		// (at most its allocatable) has room for them, as a round requires.
		cpuUsed, memUsed := min(cpuCap, milli(u[corev1.ResourceCPU])), min(memCap, mib(u[corev1.ResourceMemory]))
		for _, p := range on {
			h := holds[p]
			if h == nil {
				continue
			}
			rl := Requests(p)
			c, m := milli(rl[corev1.ResourceCPU]), mib(rl[corev1.ResourceMemory])
			if c > cpuUsed || m > memUsed {
				h.ok = false
				continue
			}
			cpuUsed -= c
			memUsed -= m
		}
		wn := &wire.NodeT{
			Name: n.Name, GpuModel: n.Labels[GPUProduct], GpuFreeMilli: free,
			CpuMilliCapacity: cpuCap, CpuMilliFree: max(0, cpuCap-milli(u[corev1.ResourceCPU])),
			MemoryMibCapacity: memCap, MemoryMibFree: max(0, memCap-mib(u[corev1.ResourceMemory])),
			Pool: wire.PoolShared, Healthy: nodeReady(n), Domain: -1,
		}
		if g > 0 && wn.GpuModel == "" {
			wn.GpuModel = "nvidia-gpu"
		}
		keys := make([]string, 0, len(n.Labels))
		for k := range n.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			wn.Labels = append(wn.Labels, k+"="+n.Labels[k])
		}
		for _, t := range n.Spec.Taints {
			wn.Taints = append(wn.Taints, &wire.TaintT{Key: t.Key, Value: t.Value, Effect: taintEffect(t.Effect)})
		}
		if n.Spec.Unschedulable { // as the node controller taints a cordoned node
			wn.Taints = append(wn.Taints, &wire.TaintT{Key: corev1.TaintNodeUnschedulable, Effect: wire.TaintEffectNoSchedule})
		}
		if topo != nil {
			if rack := n.Labels[opt.RackLabel]; rack != "" {
				d, ok := rackIdx[rack]
				if !ok {
					d = int32(len(topo.Domains))
					rackIdx[rack] = d
					topo.Domains = append(topo.Domains, &wire.TopologyDomainT{Name: rack, Level: 1, Parent: 0})
				}
				wn.Domain = d
			}
		}
		cluster.Nodes = append(cluster.Nodes, wn)
	}
	if topo != nil && len(rackIdx) > 0 {
		cluster.Topology = topo
	}
	req := &wire.ScheduleRequestT{Cluster: cluster, Now: now,
		Policy: &wire.PolicyT{Algorithm: wire.AlgorithmPlacer, Stacking: opt.Stacking, Order: wire.QueueOrderFifo}}
	r.Request = req
	if opt.Evict {
		// Preemption as the Slurm bridge asks it: pods report no
		// checkpoints and an evicted pod starts again, so any victim, by
		// its lost work (run time x GPUs); the other queue policies as the
		// schema's defaults (loaning has no loanable node here).
		req.Policy.Queue = &wire.QueuePolicyT{Preemption: true, PreemptMaxLostS: -1, MaxReservations: 8, Loaning: true,
			AutoReclaim: true, SensitivityThreshold: 0.5, DelayTimerMax: 1800}
	}

	// Groups: pod groups (gangs), owners whose pods need distinct nodes, lone pods.
	groups := map[string]*Group{}
	var order []string
	for _, p := range pending {
		key := "pod/" + p.Namespace + "/" + p.Name
		gang := false
		if k := r.groupKey(p); k != "" {
			key, gang = k, true
		} else if hostnameAntiAffinity(p) != nil {
			if ref := metav1.GetControllerOf(p); ref != nil {
				key = "owner/" + p.Namespace + "/" + string(ref.UID)
			}
		}
		g, ok := groups[key]
		if !ok {
			g = &Group{Key: key, Gang: gang}
			groups[key] = g
			order = append(order, key)
		}
		g.Pods = append(g.Pods, p)
	}
	for _, key := range order {
		g := groups[key]
		sort.Slice(g.Pods, func(i, j int) bool { return g.Pods[i].Name < g.Pods[j].Name })
		if opt.Wait != nil {
			waits := ""
			for _, p := range g.Pods {
				if waits = opt.Wait(p); waits != "" {
					break
				}
			}
			if waits != "" {
				for _, p := range g.Pods {
					r.Skipped = append(r.Skipped, Skipped{Pod: p, Reason: "Unschedulable", Why: waits})
				}
				continue
			}
		}
		job, why := r.job(g, bound, podsOn, minOf, now)
		if why != "" {
			for _, p := range g.Pods {
				reason := "SchedulerError"
				if strings.HasPrefix(why, "waiting") {
					reason = "Unschedulable"
				}
				r.Skipped = append(r.Skipped, Skipped{Pod: p, Reason: reason, Why: why})
			}
			continue
		}
		req.Pending = append(req.Pending, job)
		r.Groups = append(r.Groups, g)
	}
	if opt.Evict && len(req.Pending) > 0 {
		r.running(bound, holds, now)
	}
	return r
}

// job makes one group's Placer job, or says why it cannot ("waiting ..." for a gang still short of members).
func (r *Round) job(g *Group, bound []*corev1.Pod, podsOn map[string][]*corev1.Pod, minOf PodGroupMin, now int64) (*wire.JobT, string) {
	first := g.Pods[0]
	sig := ""
	partRack := ""
	for i, p := range g.Pods {
		s, err := signature(p)
		if err != "" {
			if len(g.Pods) > 1 {
				return nil, fmt.Sprintf("cannot express pod %s/%s of %s: %s", p.Namespace, p.Name, g.Key, err)
			}
			return nil, "cannot express: " + err
		}
		if i == 0 {
			sig = s
		} else if s != sig {
			return nil, fmt.Sprintf("the pods of %s differ in requests or constraints (%s and %s); Placer places a group's pods as replicas of one job",
				g.Key, first.Name, p.Name)
		}
	}
	rl := Requests(first)
	job := &wire.JobT{
		Name: g.Key, Kind: wire.JobKindBatch, Replicas: uint32(len(g.Pods)), Queue: first.Labels[QueueLabel],
		Demand: &wire.DemandT{Gpus: uint16(gpus(rl)), GpuMilli: 1000, CpuMilli: milli(rl[corev1.ResourceCPU]),
			MemoryMib: mib(rl[corev1.ResourceMemory])},
		TopologyLevel: -1, SubmitTime: first.CreationTimestamp.Unix(),
	}
	for _, p := range g.Pods[1:] { // a group's submit time: its earliest pod's
		if t := p.CreationTimestamp.Unix(); t < job.SubmitTime {
			job.SubmitTime = t
		}
	}
	if m, _ := Share(first); m > 0 {
		job.Demand.Gpus, job.Demand.GpuMilli = 1, uint16(m)
	}
	if first.Spec.Priority != nil {
		job.Priority = *first.Spec.Priority
	}
	if g.Gang {
		name := first.Labels[PodGroupLabel]
		min, ok := 0, false
		native := NativeGroupName(first)
		rackRequired := false
		if native != "" {
			name = "PodGroup " + first.Namespace + "/" + native + " (scheduling.k8s.io/v1beta1)"
			ng := NativeGroup{Found: true, Gang: true, MinCount: len(g.Pods)}
			if r.opt.PodGroup != nil {
				ng = r.opt.PodGroup(first.Namespace, native)
			}
			switch {
			case ng.Err != "":
				return nil, "waiting for " + name + ": " + ng.Err
			case !ng.Found:
				return nil, "waiting for " + name + " to exist"
			}
			min, ok = ng.MinCount, true
			for _, k := range ng.Topology {
				if k != r.opt.RackLabel || r.Request.Cluster.Topology == nil {
					return nil, fmt.Sprintf("cannot express: %s: topology key %q (only the rack label %q)", name, k, r.opt.RackLabel)
				}
				rackRequired = true
			}
		} else if minOf != nil {
			min, ok = minOf(first.Namespace, name)
		}
		if !ok {
			if v, has := first.Annotations[MinMemberAnnot]; has {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					return nil, fmt.Sprintf("pod group %s: annotation %s=%q is not a positive count", name, MinMemberAnnot, v)
				}
				min, ok = n, true
			}
		}
		if !ok {
			min = len(g.Pods) // no PodGroup and no annotation: the pods there are the gang
		}
		g.MinMember = min
		already := 0
		racks := map[string]bool{}
		for _, p := range bound {
			if GroupKey(p) == g.Key {
				already++
				if rl := r.opt.RackLabel; rl != "" {
					for _, n := range r.Nodes {
						if n.Name == p.Spec.NodeName && n.Labels[rl] != "" {
							racks[n.Labels[rl]] = true
						}
					}
				}
			}
		}
		if len(racks) == 1 { // a gang found partly bound: its rest preferably where its bound members are
			for rack := range racks {
				partRack = rack
			}
		}
		if already+len(g.Pods) < min {
			if native != "" {
				return nil, fmt.Sprintf("waiting for %s: %d of its gang minCount %d pods exist (%d bound, %d pending)",
					name, already+len(g.Pods), min, already, len(g.Pods))
			}
			return nil, fmt.Sprintf("waiting for pod group %s: %d of its minMember %d pods exist (%d bound, %d pending)",
				name, already+len(g.Pods), min, already, len(g.Pods))
		}
		job.Gang = len(g.Pods) > 1
		if r.Request.Cluster.Topology != nil && job.Gang {
			job.TopologyLevel, job.TopologyMode = 1, wire.TopologyModePreferred
		}
		if rackRequired { // schedulingConstraints.topology on the rack label: one rack, its bound members' if any
			job.TopologyLevel, job.TopologyMode = 1, wire.TopologyModeRequired
			g.RackRequired = true
		}
	}
	c, err := constraints(first)
	if err != "" {
		return nil, "cannot express: " + err
	}
	if sel := hostnameAntiAffinity(first); sel != nil {
		// Distinct nodes among the group's own pods; nodes that already run a
		// matching pod are excluded by name.
		job.DistinctNodes = true
		var taken []string
		for node, ps := range podsOn {
			for _, p := range ps {
				if p.Namespace == first.Namespace && sel.Matches(labels.Set(p.Labels)) {
					taken = append(taken, node)
					break
				}
			}
		}
		if len(taken) > 0 {
			sort.Strings(taken)
			notIn := &wire.SelectorRequirementT{Key: HostnameKey, Operator: wire.SelectorOperatorNotIn, Values: taken}
			if len(c.Required) == 0 {
				c.Required = []*wire.SelectorTermT{{}}
			}
			for _, t := range c.Required {
				t.MatchExpressions = append(t.MatchExpressions, notIn)
			}
		}
	}
	if partRack != "" && g.RackRequired { // the rest of a partly bound gang: in its bound members' rack
		in := &wire.SelectorRequirementT{Key: r.opt.RackLabel, Operator: wire.SelectorOperatorIn, Values: []string{partRack}}
		if len(c.Required) == 0 {
			c.Required = []*wire.SelectorTermT{{}}
		}
		for _, t := range c.Required {
			t.MatchExpressions = append(t.MatchExpressions, in)
		}
	} else if partRack != "" {
		c.Preferred = append(c.Preferred, &wire.PreferredTermT{Weight: 100, Preference: &wire.SelectorTermT{
			MatchExpressions: []*wire.SelectorRequirementT{{Key: r.opt.RackLabel, Operator: wire.SelectorOperatorIn, Values: []string{partRack}}}}})
	}
	job.Constraints = c
	return job, ""
}

// signature: what must be equal for pods to be replicas of one job; or why the pod cannot be expressed.
func signature(p *corev1.Pod) (string, string) {
	if a := p.Spec.Affinity; a != nil {
		if a.PodAffinity != nil && (len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 ||
			len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0) {
			return "", "pod affinity is not supported (only required pod anti-affinity on " + HostnameKey + ")"
		}
		if a.PodAntiAffinity != nil {
			if len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
				return "", "preferred pod anti-affinity is not supported"
			}
			for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if t.TopologyKey != HostnameKey {
					return "", fmt.Sprintf("pod anti-affinity on topology key %q is not supported (only %s)", t.TopologyKey, HostnameKey)
				}
				if _, err := metav1.LabelSelectorAsSelector(t.LabelSelector); err != nil {
					return "", "pod anti-affinity: " + err.Error()
				}
			}
		}
		if na := a.NodeAffinity; na != nil && na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			for _, t := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				if len(t.MatchFields) > 0 {
					return "", "node affinity matchFields is not supported (use labels, e.g. " + HostnameKey + ")"
				}
			}
		}
	}
	if len(p.Spec.TopologySpreadConstraints) > 0 {
		return "", "topologySpreadConstraints are not supported"
	}
	rl := Requests(p)
	for k := range rl {
		switch k {
		case corev1.ResourceCPU, corev1.ResourceMemory, GPUResource, corev1.ResourceEphemeralStorage, corev1.ResourcePods:
		default:
			if strings.Contains(string(k), "/") && !strings.HasPrefix(string(k), "hugepages-") {
				return "", fmt.Sprintf("extended resource %s is not supported (only %s)", k, GPUResource)
			}
		}
	}
	share, ok := Share(p)
	if !ok {
		return "", fmt.Sprintf("annotation %s=%q: want a GPU share in milli-GPU, 1..999", GPUMilliAnnot, p.Annotations[GPUMilliAnnot])
	}
	if share > 0 && gpus(rl) > 0 {
		return "", fmt.Sprintf("annotation %s with an %s request: a share asks no whole GPUs", GPUMilliAnnot, GPUResource)
	}
	if g := gpus(rl); g > 64 {
		return "", fmt.Sprintf("%d GPUs per pod (at most 64)", g)
	}
	if cpu, mem := milli(rl[corev1.ResourceCPU]), mib(rl[corev1.ResourceMemory]); cpu > 1<<40 || mem > 1<<40 {
		return "", fmt.Sprintf("requests of %d mCPU and %d MiB are past Placer's 2^40", cpu, mem)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%d|%d|%d|", milli(rl[corev1.ResourceCPU]), mib(rl[corev1.ResourceMemory]), gpus(rl), share)
	var prio int32
	if p.Spec.Priority != nil {
		prio = *p.Spec.Priority
	}
	cons, _ := json.Marshal(struct {
		S map[string]string
		T []corev1.Toleration
		A *corev1.Affinity
	}{p.Spec.NodeSelector, p.Spec.Tolerations, p.Spec.Affinity})
	fmt.Fprintf(&b, "%d|%s|%s", prio, p.Labels[QueueLabel], cons)
	return b.String(), ""
}

func hostnameAntiAffinity(p *corev1.Pod) labels.Selector {
	a := p.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return nil
	}
	for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == HostnameKey {
			if s, err := metav1.LabelSelectorAsSelector(t.LabelSelector); err == nil {
				return s
			}
		}
	}
	return nil
}

func taintEffect(e corev1.TaintEffect) wire.TaintEffect {
	switch e {
	case corev1.TaintEffectPreferNoSchedule:
		return wire.TaintEffectPreferNoSchedule
	case corev1.TaintEffectNoExecute:
		return wire.TaintEffectNoExecute
	}
	return wire.TaintEffectNoSchedule
}

func operator(op corev1.NodeSelectorOperator) (wire.SelectorOperator, bool) {
	switch op {
	case corev1.NodeSelectorOpIn:
		return wire.SelectorOperatorIn, true
	case corev1.NodeSelectorOpNotIn:
		return wire.SelectorOperatorNotIn, true
	case corev1.NodeSelectorOpExists:
		return wire.SelectorOperatorExists, true
	case corev1.NodeSelectorOpDoesNotExist:
		return wire.SelectorOperatorDoesNotExist, true
	case corev1.NodeSelectorOpGt:
		return wire.SelectorOperatorGt, true
	case corev1.NodeSelectorOpLt:
		return wire.SelectorOperatorLt, true
	}
	return 0, false
}

func term(t corev1.NodeSelectorTerm) (*wire.SelectorTermT, string) {
	out := &wire.SelectorTermT{}
	for _, e := range t.MatchExpressions {
		op, ok := operator(e.Operator)
		if !ok {
			return nil, fmt.Sprintf("node affinity operator %q", e.Operator)
		}
		out.MatchExpressions = append(out.MatchExpressions, &wire.SelectorRequirementT{Key: e.Key, Operator: op, Values: e.Values})
	}
	return out, ""
}

func constraints(p *corev1.Pod) (*wire.NodeConstraintsT, string) {
	c := &wire.NodeConstraintsT{}
	keys := make([]string, 0, len(p.Spec.NodeSelector))
	for k := range p.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.NodeSelector = append(c.NodeSelector, k+"="+p.Spec.NodeSelector[k])
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		if req := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
			for _, t := range req.NodeSelectorTerms {
				wt, err := term(t)
				if err != "" {
					return nil, err
				}
				c.Required = append(c.Required, wt)
			}
		}
		for _, pt := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			wt, err := term(pt.Preference)
			if err != "" {
				return nil, err
			}
			c.Preferred = append(c.Preferred, &wire.PreferredTermT{Weight: pt.Weight, Preference: wt})
		}
	}
	for _, t := range p.Spec.Tolerations {
		wt := &wire.TolerationT{Key: t.Key, Value: t.Value, Operator: wire.TolerationOperatorEqual, Effect: wire.TolerationEffectAll}
		if t.Operator == corev1.TolerationOpExists {
			wt.Operator = wire.TolerationOperatorExists
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule:
			wt.Effect = wire.TolerationEffectNoSchedule
		case corev1.TaintEffectPreferNoSchedule:
			wt.Effect = wire.TolerationEffectPreferNoSchedule
		case corev1.TaintEffectNoExecute:
			wt.Effect = wire.TolerationEffectNoExecute
		}
		c.Tolerations = append(c.Tolerations, wt)
	}
	return c, ""
}

// Message is an unplaced job's reason as a pod condition says it: Placer's
// explanation in kube-scheduler's words ("0/64 nodes are available: ...")
// where it has one, after Placer's word that the pod can never run on this
// cluster when it cannot (as kube-scheduler's PartitionNodeLimit-like
// messages do not), else its reason and detail.
func Message(u *wire.UnplacedT) string {
	if i := strings.Index(u.Detail, "It can never run"); u.Never && i >= 0 {
		return u.Detail[i:]
	}
	if i := strings.Index(u.Detail, "0/"); i >= 0 {
		return u.Detail[i:]
	}
	if u.Detail != "" {
		return wire.EnumNamesUnplacedReason[u.Reason] + ": " + u.Detail
	}
	return wire.EnumNamesUnplacedReason[u.Reason]
}

// Drop takes pending job j out of the round (Placer refused the round
// naming it) and reports its pods with `why`.
func (r *Round) Drop(j int, why string) {
	for _, p := range r.Groups[j].Pods {
		r.Skipped = append(r.Skipped, Skipped{Pod: p, Reason: "SchedulerError", Why: why})
	}
	r.Request.Pending = append(r.Request.Pending[:j:j], r.Request.Pending[j+1:]...)
	r.Groups = append(r.Groups[:j:j], r.Groups[j+1:]...)
}
