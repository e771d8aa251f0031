package translate

// What kube-scheduler checks on a node and Placer does not count: the
// node's pod count (allocatable "pods"), ephemeral storage, hugepages and
// extended resources other than nvidia.com/gpu ("side resources"), and
// host ports. Each pod's round excludes the nodes that lack them (rules.go);
// the placements of one round are then checked together against them, in
// the order of the queue (Cluster.Take), since Placer does not see one
// placement use up what the next needed.

import (
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

const portsWhy = "node(s) didn't have free ports for the requested pod ports"

// sideRequests: what a pod with requests rl asks of a node beside CPU,
// memory and GPUs: one of its pods, and each other resource it asks.
func sideRequests(rl corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: one}
	for k, v := range rl {
		if !placerResource(k) && k != corev1.ResourcePods && !v.IsZero() {
			out[k] = v
		}
	}
	return out
}

// sideFree: node n's allocatable side resources less what `on` (its bound
// pods, whose requests sum to used) take. A resource the node does not
// report is none (as kube-scheduler: a node without "pods" holds none).
func sideFree(n *corev1.Node, on []*corev1.Pod, used corev1.ResourceList) corev1.ResourceList {
	free := corev1.ResourceList{}
	for k, v := range n.Status.Allocatable {
		if !placerResource(k) {
			free[k] = v.DeepCopy()
		}
	}
	q := free[corev1.ResourcePods]
	q.Sub(*resourceCount(int64(len(on))))
	free[corev1.ResourcePods] = q
	for k, v := range used {
		if !placerResource(k) && k != corev1.ResourcePods {
			q := free[k]
			q.Sub(v)
			free[k] = q
		}
	}
	return free
}

// sideMiss: why free cannot hold side, in kube-scheduler's words ("" = it can).
func sideMiss(free, side corev1.ResourceList) string {
	if p, f := side[corev1.ResourcePods], free[corev1.ResourcePods]; p.Cmp(f) > 0 {
		return "Too many pods"
	}
	names := make([]string, 0, len(side))
	for k := range side {
		if k != corev1.ResourcePods {
			names = append(names, string(k))
		}
	}
	sort.Strings(names)
	for _, k := range names {
		want, have := side[corev1.ResourceName(k)], free[corev1.ResourceName(k)]
		if want.Cmp(have) > 0 {
			return "Insufficient " + k
		}
	}
	return ""
}

// Take: node ni takes pod p's side resources, host ports, in-tree disks
// and ReadWriteOncePod claims (solo.go), CSI volumes (attach.go), pre-made
// volumes (the smallest on the node for each claim: TookVolumes) and
// claims (on `gpus`, the GPUs Placer chose, where its devices allow), or
// says why it cannot (kube-scheduler's words; nothing is taken then).
// The planner calls it for a round's placements in queue order.
func (c *Cluster) Take(p *corev1.Pod, ni int, gpus []uint8) string {
	ports := HostPorts(p)
	if c.ports[ni].conflicts(ports) {
		return portsWhy
	}
	side := sideRequests(Requests(p))
	if why := sideMiss(c.side[ni], side); why != "" {
		return why
	}
	if c.diskTaken(p, ni) {
		return diskWhy
	}
	if c.soloTaken(p) {
		return soloWhy
	}
	csi := c.attachVolumes(p)
	if why := c.attachMiss(csi, ni); why != "" {
		return why
	}
	var vols map[string]string
	if c.opt.VolumeNodes != nil {
		if v := c.opt.VolumeNodes(p); v != nil && len(v.PreMade) > 0 {
			vols = map[string]string{}
			took := map[string]bool{}
			for _, pm := range v.PreMade {
				pv := c.volumeOn(pm, ni, took)
				if pv == nil {
					return provisionWhy
				}
				vols[pm.Claim], took[pv.Name] = pv.Name, true
			}
		}
	}
	if pc := c.claims(p); pc != nil {
		var on []int
		for _, g := range gpus {
			if i := int(g) - c.draFirst[ni]; i >= 0 {
				on = append(on, i)
			}
		}
		pa, why := c.dra.Take(pc, c.Nodes[ni], on)
		if why != "" {
			return why
		}
		c.claimed[p.UID] = pa
	}
	subList(c.side[ni], side)
	c.ports[ni].add(ports)
	c.attach(csi, ni)
	c.takeSolo(p)
	if hasDisks(p) {
		if c.took == nil {
			c.took = map[int][]*corev1.Pod{}
		}
		c.took[ni] = append(c.took[ni], p)
	}
	if vols != nil {
		if c.volTaken == nil {
			c.volTaken, c.volumes = map[string]bool{}, map[types.UID]map[string]string{}
		}
		for _, pv := range vols {
			c.volTaken[pv] = true
		}
		c.volumes[p.UID] = vols
	}
	return ""
}

// HostPorts: the ports a pod takes on its node, as kube-scheduler's
// NodePorts counts them (its containers' and its native sidecars' ports
// with a hostPort), in a stable order.
func HostPorts(p *corev1.Pod) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, ctr := range p.Spec.InitContainers {
		if ctr.RestartPolicy == nil || *ctr.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			continue
		}
		for _, cp := range ctr.Ports {
			if cp.HostPort > 0 {
				out = append(out, cp)
			}
		}
	}
	for _, ctr := range p.Spec.Containers {
		for _, cp := range ctr.Ports {
			if cp.HostPort > 0 {
				out = append(out, cp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return portKey(out[i]) < portKey(out[j]) })
	return out
}

func portKey(cp corev1.ContainerPort) string {
	ip, proto := sanitize(cp)
	return proto + "/" + ip + ":" + strconv.Itoa(int(cp.HostPort))
}

func sanitize(cp corev1.ContainerPort) (ip, proto string) {
	ip, proto = cp.HostIP, string(cp.Protocol)
	if ip == "" {
		ip = "0.0.0.0"
	}
	if proto == "" {
		proto = string(corev1.ProtocolTCP)
	}
	return ip, proto
}

type hostPort struct {
	ip, proto string
	port      int32
}

// portSet: the host ports in use on a node.
type portSet []hostPort

func (s *portSet) add(ps []corev1.ContainerPort) {
	for _, cp := range ps {
		ip, proto := sanitize(cp)
		*s = append(*s, hostPort{ip, proto, cp.HostPort})
	}
}

// conflicts: kube-scheduler's HostPortInfo.CheckConflict for any of ps:
// the same protocol and port on the same address, or either on 0.0.0.0.
func (s portSet) conflicts(ps []corev1.ContainerPort) bool {
	for _, cp := range ps {
		ip, proto := sanitize(cp)
		for _, u := range s {
			if u.port == cp.HostPort && u.proto == proto && (u.ip == ip || u.ip == "0.0.0.0" || ip == "0.0.0.0") {
				return true
			}
		}
	}
	return false
}

// PortsClash: do two pods ask for a host port in common (so that they
// cannot share a node)?
func PortsClash(a, b *corev1.Pod) bool {
	var s portSet
	s.add(HostPorts(a))
	return len(s) > 0 && s.conflicts(HostPorts(b))
}
