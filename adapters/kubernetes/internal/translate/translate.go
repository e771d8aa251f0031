// Package translate turns Kubernetes nodes and pods into one Placer round
// (schemas/placement.fbs) and Placer's reply into bindings and reasons.
// docs/kubernetes.md lists the mapping field by field.
//
// A round is built from a Cluster (the nodes, and the pods that hold them)
// and Units (the pods to place, each unit one Placer job whose replicas are
// its pods). Pod affinity, anti-affinity, topology spread, host ports and
// the resources Placer does not count (the node's pod count, ephemeral
// storage, hugepages, extended resources) are turned into node requirements
// of each job, computed against the Cluster (rules.go): Placer then places
// only where kube-scheduler's filters would let the pod go, and the reasons
// are given back in kube-scheduler's words (explain.go).
package translate

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/version"
	resourcehelper "k8s.io/component-helpers/resource"

	"placer.local/kubernetes/internal/dra"
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
	// sends the GPU index Placer chose as GPUIndexAnnot in the Binding's
	// annotations, which the API server copies onto the pod.
	GPUMilliAnnot = "placer.io/gpu-milli"
	GPUIndexAnnot = "placer.io/gpu-index"
	// NodeLabel is a label the round (only) gives each node, its name, so
	// that a job can exclude nodes by name (nodes need not carry
	// kubernetes.io/hostname, nor equal to their name).
	NodeLabel = "placer.io/node"
	// none: a label value no node has (label values cannot hold '/'), for
	// an In requirement that admits no node.
	none = "placer.io/no-node"
	// unschedulable: a job's why that is Unschedulable, not SchedulerError.
	unschedulable = "unschedulable: "
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
	// TopologyLabels: the node labels whose values are the topology's
	// domains, finest level first (e.g. the NVLink clique, the rack, the
	// zone; topology.go); none: no topology.
	TopologyLabels []string
	Stacking       bool // Policy.stacking, as the Slurm bridge sends it
	// Evict: bound pods of a lower priority than some pending pod go into
	// the round as running work, preemptible, and Placer's preemption is on
	// (the scheduler's --evict). Without it no pod is ever a victim.
	Evict bool
	// NotEvictable says why a bound pod must not be a victim this round
	// ("" = it may be), e.g. its last eviction was refused (a
	// PodDisruptionBudget). Read only with Evict.
	NotEvictable func(*corev1.Pod) string
	// NamespaceLabels: a namespace's labels, for the namespaceSelector of a
	// pod affinity term (nil, or not found: no labels).
	NamespaceLabels func(namespace string) map[string]string
	// DRA: the cycle's devices and claims (nil: dynamic resource
	// allocation is off, and no pod with claims comes to a round).
	DRA *dra.Snapshot
	// Claimed: the claims of the pods placed this cycle before this round.
	Claimed []*dra.PodAlloc
	// VolumeNodes: where pod p's volumes let it go (nil: anywhere).
	VolumeNodes func(p *corev1.Pod) *Volumes
	// VolumesTaken: the pre-made volumes the pods placed this cycle before
	// this round took (Volumes.PreMade).
	VolumesTaken map[string]bool
	// Attach: the CSI volumes pods attach to their nodes, and what the
	// nodes can attach (kube-scheduler's NodeVolumeLimits, attach.go; nil:
	// not counted).
	Attach Attacher
	// SoloClaims: pod p's claims of access mode ReadWriteOncePod (solo.go;
	// nil: none read).
	SoloClaims func(p *corev1.Pod) []string
	// ControlPlane: the control plane's version, for the node features a
	// pod needs (kube-scheduler's NodeDeclaredFeatures, features.go; nil:
	// not read).
	ControlPlane *version.Version
	// Kueue: its LocalQueues and ClusterQueues, sent as the round's queue
	// tree (kueue.go; nil: Kueue is not served, and a job's queue is its
	// pods' kueue.x-k8s.io/queue-name, named, not limited).
	Kueue *Kueue
}

// Volumes: where a pod's volumes let it go, as kube-scheduler's
// VolumeBinding reads them (on a node's labels; rules.go, volumeRules).
type Volumes struct {
	// Bound: the required node affinity of each PersistentVolume its
	// claims are bound to (a local volume's node, a zonal disk's zone).
	Bound []*corev1.NodeSelector
	// Provision: the allowed topologies of each StorageClass a claim of
	// its waits to be provisioned from (WaitForFirstConsumer).
	Provision []*corev1.NodeSelector
	// Capacity: for each claim to provision whose CSI driver tracks its
	// storage capacity, where a CSIStorageCapacity of its class says a
	// volume of its size fits (no term: nowhere).
	Capacity []*corev1.NodeSelector
	// Node: the node its claims are being provisioned for ("" = none yet:
	// their volume.kubernetes.io/selected-node annotation).
	Node string
	// PreMade: its claims to be bound to pre-made volumes (a
	// WaitForFirstConsumer class without a provisioner: local volumes).
	PreMade []PreMade
	// Zone: for each zone or region label of a PersistentVolume its claims
	// are bound to, the nodes kube-scheduler's VolumeZone admits.
	Zone []*corev1.NodeSelector
}

// PreMade: a claim to be bound to a pre-made volume, and the volumes that
// could take it on some node (kube-scheduler's FindMatchingVolume, less
// the node), smallest first; a volume already given the claim alone.
type PreMade struct {
	Claim string `json:"-"`
	// Key: what tells claims apart by the volumes that could take them
	// (their spec, and a volume given one of them), for the classes of
	// alike pods; the volumes themselves are not in the signature.
	Key     string
	Volumes []*corev1.PersistentVolume `json:"-"`
}

// NodeSignature: what tells alike pods apart by the nodes they may use
// beyond Signature ("" = nothing): where their volumes may be
// (VolumeNodes), the CSI volumes they attach (attach.go), the node
// features they need (features.go).
func (o Options) NodeSignature(p *corev1.Pod) string {
	out := ""
	if o.VolumeNodes != nil {
		if v := o.VolumeNodes(p); v != nil {
			b, _ := json.Marshal(v)
			out += "|volumes:" + string(b)
		}
	}
	if a := o.attachSignature(p); a != "" {
		out += "|attach:" + a
	}
	if f := o.featureSignature(p); f != "" {
		out += "|features:" + f
	}
	return out
}

// Requests is what a pod asks of a node, as kube-scheduler's
// NodeResourcesFit counts it (k8s.io/component-helpers/resource, with
// kube-scheduler v1.37's options: requestOptions): its containers and
// native sidecars (init containers with restartPolicy Always) summed, or
// the largest of its init containers (each with the sidecars started
// before it) where that is more, pod-level spec.resources where given,
// plus the overhead; for a pod resized in place (InPlacePodVerticalScaling,
// GA), the larger of what its spec asks and what its node has allocated
// and actuated for it (its status) while the resize is not done: a pod
// shrunk keeps its room until its kubelet has given it back.
func Requests(p *corev1.Pod) corev1.ResourceList {
	if statusWithinSpec(p) {
		return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	}
	return resourcehelper.PodRequests(p, requestOptions)
}

// statusWithinSpec: whether what pod p's status says its containers hold
// is nowhere more than its spec asks (no resize in place under way, nor
// one found infeasible: the common case), so that kube-scheduler's count is
// the spec's, which takes a third of the time (no resize read: 5.6 against
// 14 µs a pod; a round sums every bound pod's).
func statusWithinSpec(p *corev1.Pod) bool {
	if p.Status.AllocatedResources != nil || p.Status.Resources != nil || resourcehelper.IsPodResizeInfeasible(p) {
		return false
	}
	spec := func(name string) corev1.ResourceList {
		for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
			for i := range cs {
				if cs[i].Name == name {
					return cs[i].Resources.Requests
				}
			}
		}
		return nil
	}
	within := func(status, spec corev1.ResourceList) bool {
		for k, v := range status {
			if s := spec[k]; v.Cmp(s) > 0 {
				return false
			}
		}
		return true
	}
	for _, sts := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for _, st := range sts {
			want := spec(st.Name)
			if !within(st.AllocatedResources, want) || (st.Resources != nil && !within(st.Resources.Requests, want)) {
				return false
			}
		}
	}
	return true
}

// requestOptions: kube-scheduler v1.37's (PodInfo.CalculateResource): the
// status resources read (InPlacePodVerticalScaling, GA), and pod-level
// ones (InPlacePodLevelResourcesVerticalScaling, beta and on).
var requestOptions = resourcehelper.PodResourcesOptions{UseStatusResources: true, InPlacePodLevelResourcesVerticalScalingEnabled: true}

// Bound reports whether a pod holds its node's resources: bound and not finished.
func Bound(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// tooMuch: what milli, mib and gpus give for a quantity past what they
// can say: more than any node holds and than Placer takes (2^40), and a
// few thousand of them still add up within int64. The API server takes
// requests such as cpu: 1e16, whose MilliValue wraps (to 0, or below 0).
const tooMuch = int64(1) << 50

var (
	milliMost = *resource.NewMilliQuantity(tooMuch, resource.DecimalSI)
	unitMost  = *resource.NewQuantity(tooMuch, resource.DecimalSI)
	// bytesMost: the most bytes whose MiB mib counts exactly; past it, more
	// than 2^43 MiB, and so tooMuch.
	bytesMost = *resource.NewQuantity(math.MaxInt64-(1<<20-1), resource.BinarySI)
)

func milli(q resource.Quantity) int64 {
	if q.Cmp(milliMost) > 0 {
		return tooMuch
	}
	return q.MilliValue()
}

func mib(q resource.Quantity) int64 {
	if q.Cmp(bytesMost) > 0 {
		return tooMuch
	}
	b := q.Value()
	return (b + (1<<20 - 1)) >> 20
}

func gpus(rl corev1.ResourceList) int64 {
	q, ok := rl[GPUResource]
	if !ok {
		return 0
	}
	if q.Cmp(unitMost) > 0 {
		return tooMuch
	}
	return q.Value()
}

// placerResource: what Placer counts itself (the rest is a side resource, side.go).
func placerResource(r corev1.ResourceName) bool {
	return r == corev1.ResourceCPU || r == corev1.ResourceMemory || r == GPUResource
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Priority: a pod's spec.priority (0 when unset).
func Priority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// Unit is one Placer job: pods placed as replicas of one job (replica i
// is Pods[i]), all alike (Signature).
type Unit struct {
	Key  string
	Pods []*corev1.Pod
	// Gang: all of Pods or none (Placer's gang).
	Gang bool
	// DistinctNodes: each pod on a node of its own (required pod
	// anti-affinity on the hostname among the unit's pods, or a host port
	// they share).
	DistinctNodes bool
	// Domain: the deepest topology domain holding the members of the
	// unit's pod group already placed (nil: none); preferred, and its
	// domain of the level of Within required.
	Domain Domain
	// Within: a topology label (Options.TopologyLabels): all the unit's
	// replicas in one domain of its level, required ("": none).
	Within string
	// Local: a gang's replicas preferably in one domain of the finest
	// level, else of the next (one NVLink clique, else one rack, ...).
	Local bool
	// Avoid: nodes this unit is not placed on, with kube-scheduler's reason
	// (a gang whose pods a node could not all take, side.go).
	Avoid map[string]string
}

// distinctWhy: kube-scheduler's reason for a node one of the unit's own
// pods took.
func (u *Unit) distinctWhy() string {
	if len(u.Pods) > 0 && PortsClash(u.Pods[0], u.Pods[0]) {
		return portsWhy
	}
	return antiWhy
}

// Skipped is a unit the round leaves out, and why (reported on its pods).
type Skipped struct {
	Unit   *Unit
	Reason string // "Unschedulable" for pods that wait, "SchedulerError" for what cannot be expressed
	Why    string
}

// Round is a request and what its jobs stand for.
type Round struct {
	opt     Options
	C       *Cluster
	Request *wire.ScheduleRequestT
	Units   []*Unit // job i of Request.Pending is Units[i]
	Skipped []Skipped
	// Running: with Options.Evict, the pods of each running job of the
	// round by its name (a pod group's bound members together).
	Running map[string][]*corev1.Pod
	rules   [][]rule // per job: the node requirements its pod rules added (rules.go)
	claims  []bool   // per job: its pods have claims (their GPUs are devices: explain.go)
	own     []*wire.NodeConstraintsT
	after   []wire.NodeT    // the nodes after the reply's placements (Placed)
	ownOn   map[[2]int]bool // (job, node) with a replica of the job placed there
}

// Build makes the round of `units` on cluster c. A unit that cannot be
// expressed is Skipped.
func Build(c *Cluster, units []*Unit, now int64) *Round {
	opt := c.opt
	r := &Round{opt: opt, C: c}
	cluster := &wire.ClusterT{Epoch: uint64(now), Nodes: c.Wire, Topology: c.Topo}
	req := &wire.ScheduleRequestT{Cluster: cluster, Now: now,
		Policy: &wire.PolicyT{Algorithm: wire.AlgorithmPlacer, Stacking: opt.Stacking, Order: wire.QueueOrderFifo}}
	r.Request = req
	if opt.Kueue != nil {
		req.Queues = opt.Kueue.Tree()
	}
	if opt.Evict {
		// Preemption as the Slurm bridge asks it: pods report no
		// checkpoints and an evicted pod starts again, so any victim, by
		// its lost work (run time x GPUs); the other queue policies as the
		// schema's defaults (loaning has no loanable node here).
		req.Policy.Queue = &wire.QueuePolicyT{Preemption: true, PreemptMaxLostS: -1, MaxReservations: 8, Loaning: true,
			AutoReclaim: true, SensitivityThreshold: 0.5, DelayTimerMax: 1800}
	}
	for _, u := range units {
		job, rules, own, why := r.job(u)
		if why != "" {
			reason := "SchedulerError"
			if w, ok := strings.CutPrefix(why, unschedulable); ok {
				reason, why = "Unschedulable", w
			}
			r.Skipped = append(r.Skipped, Skipped{Unit: u, Reason: reason, Why: why})
			continue
		}
		req.Pending = append(req.Pending, job)
		r.Units = append(r.Units, u)
		r.rules = append(r.rules, rules)
		r.own = append(r.own, own)
		r.claims = append(r.claims, r.C.claims(u.Pods[0]) != nil)
	}
	if (opt.Evict || len(req.Queues) > 0) && len(req.Pending) > 0 {
		r.running(now)
	}
	return r
}

// queue: pod p's Placer queue (Options.Kueue).
func (r *Round) queue(p *corev1.Pod) string {
	if r.opt.Kueue == nil {
		return p.Labels[QueueLabel]
	}
	return r.opt.Kueue.QueueOf(p)
}

// Signature is what must be equal for pods to be replicas of one job
// (requests, priority, queue, namespace, every constraint, host ports,
// and the labels in `keys`: those some pod rule of the round selects
// on); or why the pod cannot be expressed.
func Signature(p *corev1.Pod, keys map[string]bool) (string, string) {
	rl := Requests(p)
	if why := expressible(p, rl); why != "" {
		return "", why
	}
	share, _ := Share(p)
	names := make([]string, 0, len(rl))
	for k := range rl {
		names = append(names, string(k))
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		q := rl[corev1.ResourceName(k)]
		fmt.Fprintf(&b, "%s=%s|", k, q.String())
	}
	var projected []string
	for k, v := range p.Labels {
		if keys[k] {
			projected = append(projected, k+"="+v)
		}
	}
	sort.Strings(projected)
	cons, _ := json.Marshal(struct {
		S map[string]string
		T []corev1.Toleration
		A *corev1.Affinity
		P []corev1.TopologySpreadConstraint
		H []corev1.ContainerPort
		L []string
	}{p.Spec.NodeSelector, p.Spec.Tolerations, p.Spec.Affinity, p.Spec.TopologySpreadConstraints, HostPorts(p), projected})
	fmt.Fprintf(&b, "%d|%d|%s|%s|%s", share, Priority(p), p.Labels[QueueLabel], p.Namespace, cons)
	return b.String(), ""
}

// expressible: why a pod cannot be a Placer job ("" = it can).
func expressible(p *corev1.Pod, rl corev1.ResourceList) string {
	if a := p.Spec.Affinity; a != nil {
		if na := a.NodeAffinity; na != nil && na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			for _, t := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				for _, f := range t.MatchFields {
					if f.Key != "metadata.name" || (f.Operator != corev1.NodeSelectorOpIn && f.Operator != corev1.NodeSelectorOpNotIn) {
						return fmt.Sprintf("node affinity matchFields %s %s (only metadata.name In or NotIn, as the API server allows)", f.Key, f.Operator)
					}
				}
			}
		}
	}
	if why := rulesProblem(p); why != "" {
		return why
	}
	share, ok := Share(p)
	if !ok {
		return fmt.Sprintf("annotation %s=%q: want a GPU share in milli-GPU, 1..999", GPUMilliAnnot, p.Annotations[GPUMilliAnnot])
	}
	if share > 0 && gpus(rl) > 0 {
		return fmt.Sprintf("annotation %s with an %s request: a share asks no whole GPUs", GPUMilliAnnot, GPUResource)
	}
	if g := gpus(rl); g > MaxNodeGPUs {
		return fmt.Sprintf("%s GPUs per pod (at most %d)", rl.Name(GPUResource, resource.DecimalSI).String(), MaxNodeGPUs)
	}
	return ""
}

// pastEveryNode: why no node can ever hold a pod's requests rl of CPU or
// memory, in kube-scheduler's words ("" when some could): past Placer's
// 2^40 mCPU or MiB, which no node has.
func pastEveryNode(rl corev1.ResourceList, nodes int) string {
	var short []string
	if milli(rl[corev1.ResourceCPU]) > maxResource {
		short = append(short, fmt.Sprintf("%d Insufficient cpu", nodes))
	}
	if mib(rl[corev1.ResourceMemory]) > maxResource {
		short = append(short, fmt.Sprintf("%d Insufficient memory", nodes))
	}
	if len(short) == 0 {
		return ""
	}
	return fmt.Sprintf("0/%d nodes are available: %s.", nodes, strings.Join(short, ", "))
}

// job makes one unit's Placer job, or says why it cannot; rules are the
// node requirements its pod rules and side resources added, own its
// constraints before them (explain.go tells the two apart).
func (r *Round) job(u *Unit) (*wire.JobT, []rule, *wire.NodeConstraintsT, string) {
	first := u.Pods[0]
	rl := Requests(first)
	if why := pastEveryNode(rl, len(r.C.Nodes)); why != "" {
		return nil, nil, nil, unschedulable + why
	}
	if why := expressible(first, rl); why != "" {
		if len(u.Pods) > 1 {
			return nil, nil, nil, fmt.Sprintf("cannot express pod %s/%s of %s: %s", first.Namespace, first.Name, u.Key, why)
		}
		return nil, nil, nil, "cannot express: " + why
	}
	job := &wire.JobT{
		Name: u.Key, Kind: wire.JobKindBatch, Replicas: uint32(len(u.Pods)), Queue: r.queue(first), Demand: podDemand(first),
		TopologyLevel: -1, SubmitTime: first.CreationTimestamp.Unix(), Priority: Priority(first),
		Gang: u.Gang && len(u.Pods) > 1, DistinctNodes: u.DistinctNodes && len(u.Pods) > 1,
	}
	for _, p := range u.Pods[1:] { // a unit's submit time: its earliest pod's
		if t := p.CreationTimestamp.Unix(); t < job.SubmitTime {
			job.SubmitTime = t
		}
	}
	var claimRules []rule
	if pc := r.C.claims(first); pc != nil {
		if why := r.C.dra.Check(pc); why != "" {
			return nil, nil, nil, unschedulable + fmt.Sprintf("0/%d nodes are available: %s.", len(r.C.Nodes), why)
		}
		fits, g, m, err := r.C.dra.Fit(pc, r.C.Nodes)
		if err != "" {
			return nil, nil, nil, "cannot allocate its claims: " + err
		}
		switch {
		case m < 1000 && job.Demand.Gpus == 0:
			job.Demand.Gpus, job.Demand.GpuMilli = 1, m
		case m == 1000 && job.Demand.GpuMilli == 1000:
			job.Demand.Gpus += g
		}
		byWhy := map[string][]string{}
		for _, n := range r.C.Nodes {
			if why := fits[n.Name]; why != "" {
				byWhy[why] = append(byWhy[why], n.Name)
			}
		}
		for _, why := range sortedKeys(byWhy) {
			claimRules = append(claimRules, rule{why, orderClaims, r.C.exclude(byWhy[why])})
		}
	}
	labels := r.opt.TopologyLabels
	topo := r.C.Topo != nil
	if topo && job.Gang && u.Local {
		// Placer puts a gang under the deepest domain that holds it whole:
		// one of the finest level, else of the next, up to the cluster.
		job.TopologyLevel, job.TopologyMode = int8(len(labels)), wire.TopologyModePreferred
	}
	within := 0
	if u.Within != "" {
		within = Level(labels, u.Within)
		if !topo || within == 0 {
			return nil, nil, nil, fmt.Sprintf("cannot express: one domain of %q required, and no node has that label", u.Within)
		}
		job.TopologyLevel, job.TopologyMode = int8(within), wire.TopologyModeRequired
	}
	c, err := constraints(first)
	if err != "" {
		return nil, nil, nil, "cannot express: " + err
	}
	own := cloneConstraints(c)
	if len(u.Domain) > 0 && topo {
		// Near the members placed: in their domain of the required level
		// (the rest of a gang that must be in one), preferably in each of
		// their domains, the finest counting most.
		for _, e := range u.Domain[:min(within, len(u.Domain))].trim().selector(labels) {
			require(c, e)
		}
		for k := within + 1; k <= len(u.Domain); k++ {
			if u.Domain[k-1] != "" {
				c.Preferred = append(c.Preferred, &wire.PreferredTermT{Weight: 100, Preference: &wire.SelectorTermT{
					MatchExpressions: u.Domain[:k].selector(labels)}})
			}
		}
	}
	rules, prefs := r.C.rules(first)
	byWhy := map[string][]string{}
	for n, why := range u.Avoid {
		byWhy[why] = append(byWhy[why], n)
	}
	for _, why := range sortedKeys(byWhy) {
		sort.Strings(byWhy[why])
		rules = append(rules, rule{why, orderSide, notIn(NodeLabel, byWhy[why])})
	}
	rules = append(rules, claimRules...)
	for _, ru := range rules {
		require(c, ru.req)
	}
	c.Preferred = append(c.Preferred, prefs...)
	job.Constraints = c
	return job, rules, own, ""
}

// require ANDs e into every required term (one term of it alone when there is none).
func require(c *wire.NodeConstraintsT, e *wire.SelectorRequirementT) {
	if len(c.Required) == 0 {
		c.Required = []*wire.SelectorTermT{{}}
	}
	for _, t := range c.Required {
		t.MatchExpressions = append(t.MatchExpressions, e)
	}
}

func cloneConstraints(c *wire.NodeConstraintsT) *wire.NodeConstraintsT {
	out := &wire.NodeConstraintsT{NodeSelector: c.NodeSelector, Preferred: c.Preferred, Tolerations: c.Tolerations}
	for _, t := range c.Required {
		out.Required = append(out.Required, &wire.SelectorTermT{MatchExpressions: append([]*wire.SelectorRequirementT(nil), t.MatchExpressions...)})
	}
	return out
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

// term: a node selector term; its matchFields on metadata.name (a
// DaemonSet's pods are pinned so) as the round's NodeLabel.
func term(t corev1.NodeSelectorTerm) (*wire.SelectorTermT, string) {
	out := &wire.SelectorTermT{}
	add := func(e corev1.NodeSelectorRequirement, key string) string {
		op, ok := operator(e.Operator)
		if !ok {
			return fmt.Sprintf("node affinity operator %q", e.Operator)
		}
		out.MatchExpressions = append(out.MatchExpressions, &wire.SelectorRequirementT{Key: key, Operator: op, Values: e.Values})
		return ""
	}
	for _, e := range t.MatchExpressions {
		if why := add(e, e.Key); why != "" {
			return nil, why
		}
	}
	for _, f := range t.MatchFields {
		if why := add(f, NodeLabel); why != "" {
			return nil, why
		}
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

// Drop takes pending job j out of the round (Placer refused the round
// naming it) and reports its unit with `why`.
func (r *Round) Drop(j int, why string) {
	r.Skipped = append(r.Skipped, Skipped{Unit: r.Units[j], Reason: "SchedulerError", Why: why})
	r.Request.Pending = append(r.Request.Pending[:j:j], r.Request.Pending[j+1:]...)
	r.Units = append(r.Units[:j:j], r.Units[j+1:]...)
	r.rules = append(r.rules[:j:j], r.rules[j+1:]...)
	r.own = append(r.own[:j:j], r.own[j+1:]...)
	r.claims = append(r.claims[:j:j], r.claims[j+1:]...)
}
