package translate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// Cluster is the round's cluster: the nodes (by name), what the pods bound
// to them hold, and the pods themselves (for pod rules, rules.go).
type Cluster struct {
	opt   Options
	Nodes []*corev1.Node // sorted by name; node i is Wire[i]
	Wire  []*wire.NodeT
	Topo  *wire.TopologyT
	index map[string]int
	on    [][]*corev1.Pod // per node: its bound pods, oldest first
	side  []corev1.ResourceList
	ports []portSet
	holds map[*corev1.Pod]*holding
	// anti: bound pods with required pod anti-affinity (their terms apply
	// to every pod: kube-scheduler's symmetry).
	anti      []*corev1.Pod
	sideCache map[string][]rule
	// Dynamic resource allocation (Options.DRA): the round's view, each
	// node's first GPU from its devices (after its nvidia.com/gpu ones),
	// the pods' claims, and the claims Take allocated, by pod.
	dra       *dra.View
	draFirst  []int
	podClaims map[types.UID]*dra.PodClaims
	claimed   map[types.UID]*dra.PodAlloc
	// excluded: the round's own labels (exclude), by key: the nodes that
	// have it; exclKey: a key by the nodes' names joined.
	excluded map[string]map[string]bool
	exclKey  map[string]string
	// Pre-made volumes (Volumes.PreMade): each one's nodes, by name; those
	// Take gave a pod this round; what it gave each pod, claim to volume;
	// the nodes by hostname.
	volNodes  map[string]map[int]bool
	volTaken  map[string]bool
	volumes   map[types.UID]map[string]string
	hostnames map[string][]int
	// attached: each node's CSI volumes, read once a round where a pod
	// needs them (attach.go).
	attached []*attached
	// inUse: the claims of the pods on the nodes, "ns/name", read once a
	// round where a pod has a ReadWriteOncePod claim; took: the pods with
	// in-tree disks Take gave each node this round (solo.go).
	inUse map[string]bool
	took  map[int][]*corev1.Pod
	// GPUsLeftOut: the nodes with more GPUs than Placer takes on one
	// (MaxNodeGPUs), whose GPUs the round leaves out (NewCluster).
	GPUsLeftOut []string
}

// MaxNodeGPUs: the most GPUs Placer takes on one node (its
// max_gpus_per_node); a round with a node of more is refused whole.
const MaxNodeGPUs = 64

// maxResource: the most mCPU or MiB Placer takes for a demand or a node's
// capacity (its max_resource, 2^40).
const maxResource = int64(1) << 40

// NewCluster: `nodes` with what `bound` pods use (bound by anyone, or by
// this scheduler and not seen yet: pods with Spec.NodeName set, not
// finished). Pods bound to a node not in `nodes` are left out.
func NewCluster(nodes []*corev1.Node, bound []*corev1.Pod, opt Options) *Cluster {
	nodes = append([]*corev1.Node(nil), nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	c := &Cluster{opt: opt, Nodes: nodes, index: make(map[string]int, len(nodes)),
		on: make([][]*corev1.Pod, len(nodes)), side: make([]corev1.ResourceList, len(nodes)),
		ports: make([]portSet, len(nodes)), holds: map[*corev1.Pod]*holding{}}
	for i, n := range nodes {
		c.index[n.Name] = i
	}
	if opt.DRA != nil {
		c.dra = opt.DRA.View(opt.Claimed)
		c.draFirst = make([]int, len(nodes))
		c.podClaims, c.claimed = map[types.UID]*dra.PodClaims{}, map[types.UID]*dra.PodAlloc{}
	}
	for _, p := range bound {
		if i, ok := c.index[p.Spec.NodeName]; ok {
			c.on[i] = append(c.on[i], p)
			if hasAnti(p) {
				c.anti = append(c.anti, p)
			}
		}
	}
	var topo *tree
	if len(opt.TopologyLabels) > 0 {
		topo = newTree(opt.TopologyLabels)
	}
	for ni, n := range nodes {
		on := c.on[ni]
		sort.SliceStable(on, func(i, j int) bool { return OlderFirst(on[i], on[j]) })
		reqs := make([]corev1.ResourceList, len(on))
		used := corev1.ResourceList{}
		for i, p := range on {
			reqs[i] = Requests(p)
			addList(used, reqs[i])
			c.ports[ni].add(HostPorts(p))
		}
		c.side[ni] = sideFree(n, on, used)
		alloc := n.Status.Allocatable
		free := c.gpus(ni, n, on, reqs)
		// At most Placer's 2^40 mCPU and MiB (a billion cores; a round with
		// more on a node is refused whole), whatever a node says it has.
		cpuCap, memCap := min(milli(alloc[corev1.ResourceCPU]), maxResource), min(mib(alloc[corev1.ResourceMemory]), maxResource)
		// CPU and memory: a pod holds its requests while the node's use
		// (at most its allocatable) has room for them, as a round requires.
		cpuUsed, memUsed := min(cpuCap, milli(used[corev1.ResourceCPU])), min(memCap, mib(used[corev1.ResourceMemory]))
		for i, p := range on {
			h := c.holds[p]
			if h == nil {
				continue
			}
			cpu, mem := milli(reqs[i][corev1.ResourceCPU]), mib(reqs[i][corev1.ResourceMemory])
			if cpu > cpuUsed || mem > memUsed {
				h.ok = false
				continue
			}
			cpuUsed -= cpu
			memUsed -= mem
		}
		model := n.Labels[GPUProduct]
		if c.dra != nil { // its devices' GPUs, after its nvidia.com/gpu ones
			c.draFirst[ni] = len(free)
			more, product := c.dra.GPUs(n.Name)
			free = append(free, more...)
			if model == "" {
				model = product
			}
		}
		if len(free) > MaxNodeGPUs {
			// More GPUs than Placer takes on a node (a device plugin's
			// time-slicing: 8 GPUs of 10 replicas each are 80): the round
			// leaves its GPUs out, keeps its CPU and memory for pods that
			// need no GPU, and makes none of its pods a victim, instead of
			// Placer refusing every round while the node is there.
			free = nil
			for _, p := range on {
				if h := c.holds[p]; h != nil {
					h.ok = false
				}
			}
			c.GPUsLeftOut = append(c.GPUsLeftOut, n.Name)
		}
		wn := &wire.NodeT{
			Name: n.Name, GpuModel: model, GpuFreeMilli: free,
			CpuMilliCapacity: cpuCap, CpuMilliFree: max(0, cpuCap-milli(used[corev1.ResourceCPU])),
			MemoryMibCapacity: memCap, MemoryMibFree: max(0, memCap-mib(used[corev1.ResourceMemory])),
			Pool: wire.PoolShared, Healthy: nodeReady(n), Domain: -1,
		}
		if len(free) > 0 && wn.GpuModel == "" {
			wn.GpuModel = "nvidia-gpu"
		}
		keys := make([]string, 0, len(n.Labels))
		for k := range n.Labels {
			if k != NodeLabel {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			wn.Labels = append(wn.Labels, k+"="+n.Labels[k])
		}
		wn.Labels = append(wn.Labels, NodeLabel+"="+n.Name)
		for _, t := range n.Spec.Taints {
			wn.Taints = append(wn.Taints, &wire.TaintT{Key: t.Key, Value: t.Value, Effect: taintEffect(t.Effect)})
		}
		if n.Spec.Unschedulable { // as the node controller taints a cordoned node
			wn.Taints = append(wn.Taints, &wire.TaintT{Key: corev1.TaintNodeUnschedulable, Effect: wire.TaintEffectNoSchedule})
		}
		if topo != nil {
			wn.Domain = topo.add(n)
		}
		c.Wire = append(c.Wire, wn)
	}
	if topo != nil && len(topo.wire.Domains) > 1 {
		c.Topo = topo.wire
	}
	return c
}

// gpus: node ni's free milli-GPU per GPU, after its bound pods: shares
// first, on the GPUs their annotations name; whole GPUs then on the fully
// free ones (Placer gives whole GPUs only those), each pod its own
// (Kubernetes does not say which GPUs a pod has: these indices are the
// round's, consistent with the free list). Each pod's holding is recorded
// (Options.Evict reads them).
func (c *Cluster) gpus(ni int, n *corev1.Node, on []*corev1.Pod, reqs []corev1.ResourceList) []uint16 {
	// Past MaxNodeGPUs the node's GPUs are left out (NewCluster): one more
	// entry says so, whatever count it reports (its memory bounded).
	free := make([]uint16, min(gpus(n.Status.Allocatable), MaxNodeGPUs+1))
	for i := range free {
		free[i] = 1000
	}
	for _, p := range on {
		if m, ok := Share(p); ok && m > 0 {
			if i, err := strconv.Atoi(p.Annotations[GPUIndexAnnot]); err == nil && i >= 0 && i < len(free) {
				c.holds[p] = &holding{node: ni, gpus: []uint8{uint8(i)}, milli: uint16(m), ok: free[i] >= uint16(m)}
				free[i] = uint16(max(0, int64(free[i])-m))
			}
		}
	}
	for pi, p := range on {
		k := gpus(reqs[pi])
		if k == 0 {
			if m, _ := Share(p); m == 0 {
				c.holds[p] = &holding{node: ni, milli: 1000, ok: true}
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
		c.holds[p] = h
	}
	return free
}

// Index is node `name`'s index in the round (false: not in it).
func (c *Cluster) Index(name string) (int, bool) {
	i, ok := c.index[name]
	return i, ok
}

func addList(out, rl corev1.ResourceList) {
	for k, v := range rl {
		q := out[k]
		q.Add(v)
		out[k] = q
	}
}

func subList(out, rl corev1.ResourceList) {
	for k, v := range rl {
		if q, ok := out[k]; ok {
			q.Sub(v)
			out[k] = q
		}
	}
}

var one = *resource.NewQuantity(1, resource.DecimalSI)

func resourceCount(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }

// claims: pod p's claims (nil: none, or DRA is off).
func (c *Cluster) claims(p *corev1.Pod) *dra.PodClaims {
	if c.dra == nil || len(p.Spec.ResourceClaims) == 0 {
		return nil
	}
	if pc, ok := c.podClaims[p.UID]; ok {
		return pc
	}
	pc, _ := c.opt.DRA.Resolve(p)
	c.podClaims[p.UID] = pc
	return pc
}

// maxListed: the most node names a requirement lists; more are a label of
// the round's own (Placer refuses a job's constraints of more than 256
// strings).
const maxListed = 64

// exclude: a requirement that excludes the nodes `names` (sorted): NotIn
// them, or, more than maxListed, a label of the round's own on those nodes
// (placer.io/excluded-<k>, shared by the jobs that exclude the same nodes)
// that the requirement asks to be absent.
func (c *Cluster) exclude(names []string) *wire.SelectorRequirementT {
	if len(names) <= maxListed {
		return notIn(NodeLabel, names)
	}
	all := strings.Join(names, ",")
	key, ok := c.exclKey[all]
	if !ok {
		if c.excluded == nil {
			c.excluded, c.exclKey = map[string]map[string]bool{}, map[string]string{}
		}
		key = fmt.Sprintf("%s%d", excludedPrefix, len(c.excluded))
		c.exclKey[all] = key
		set := make(map[string]bool, len(names))
		for _, n := range names {
			set[n] = true
			if i, ok := c.index[n]; ok {
				c.Wire[i].Labels = append(c.Wire[i].Labels, key+"=true")
			}
		}
		c.excluded[key] = set
	}
	return &wire.SelectorRequirementT{Key: key, Operator: wire.SelectorOperatorDoesNotExist}
}

// excludedPrefix: the round's own labels' (exclude).
const excludedPrefix = "placer.io/excluded-"

// matches: requirement e on node n, the round's own labels included.
func (c *Cluster) matches(n *corev1.Node, e *wire.SelectorRequirementT) bool {
	if set, ok := c.excluded[e.Key]; ok { // (exclude's requirements are DoesNotExist)
		return !set[n.Name]
	}
	return requirementMatches(n, e)
}

// TookVolumes: the pre-made volumes Take gave pod p's claims, claim to
// volume (nil: none).
func (c *Cluster) TookVolumes(p *corev1.Pod) map[string]string { return c.volumes[p.UID] }

// Claimed: the claims Take allocated for pod p on its node (nil: none).
func (c *Cluster) Claimed(p *corev1.Pod) *dra.PodAlloc { return c.claimed[p.UID] }
