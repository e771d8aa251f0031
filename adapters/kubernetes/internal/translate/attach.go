package translate

// What kube-scheduler's NodeVolumeLimits checks: the CSI volumes a node can
// have attached. A node's CSINode gives each CSI driver installed there
// the most volumes it attaches (allocatable.count); a pod goes to a node
// only where its volumes that the node does not have attached yet (those
// of the node's pods; a volume two pods share counts once) fit under each
// of their drivers' limits, beside those attached (its pods' volumes, and
// those its VolumeAttachments name besides). A driver that says so
// (CSIDriver preventPodSchedulingIfMissing) also refuses the nodes it is
// not installed on. A volume of an in-tree plugin migrated to a CSI driver
// (EBS, GCE PD, Azure Disk, Cinder, Portworx) counts as that driver's on a
// node with a CSINode. Each pod's round excludes the nodes that fail it
// (attachRules); the placements of one round are then checked together,
// in queue order (Cluster.Take), as side resources are (side.go).

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// kube-scheduler's reason for a node past a driver's limit.
const limitWhy = "node(s) exceed max volume count"

// Attacher: what NodeVolumeLimits reads (Options.Attach; the scheduler's
// informers).
type Attacher interface {
	// Volumes: the CSI volumes pod p attaches to its node, by unique name
	// (driver/volume handle); a claim not bound yet by a name of its own,
	// of its class's provisioner.
	Volumes(p *corev1.Pod) map[string]CSIVolume
	// Node: node `name`'s CSI drivers and what is attached to it.
	Node(name string) NodeAttach
	// Required: whether driver d refuses the nodes it is not installed on.
	Required(d string) bool
}

// CSIVolume: a volume a pod attaches: its CSI driver, and whether it is an
// in-tree plugin's, counted under the driver it migrates to only on a node
// with a CSINode (kube-scheduler's isCSIMigrationOn).
type CSIVolume struct {
	Driver string
	InTree bool
}

// NodeAttach: a node's CSI drivers (its CSINode; nil: none), each with the
// most volumes it attaches there (-1: no limit), and the volumes its
// VolumeAttachments attach, unique name to driver.
type NodeAttach struct {
	Drivers  map[string]int64
	Attached map[string]string
}

// attached: what node ni has attached: its drivers, its pods' volumes and
// how many volumes each driver has attached (its pods', then its
// VolumeAttachments' others). Read once a round, when a pod first needs it.
type attached struct {
	drivers map[string]int64
	limited bool // some driver has a limit
	vols    map[string]string
	count   map[string]int
}

func (c *Cluster) attachedOn(ni int) *attached {
	if c.attached == nil {
		c.attached = make([]*attached, len(c.Nodes))
	}
	if a := c.attached[ni]; a != nil {
		return a
	}
	na := c.opt.Attach.Node(c.Nodes[ni].Name)
	a := &attached{drivers: na.Drivers, vols: map[string]string{}, count: map[string]int{}}
	for _, l := range na.Drivers {
		a.limited = a.limited || l >= 0
	}
	if a.limited { // (the pods' volumes matter only under a limit)
		for _, q := range c.on[ni] {
			for u, v := range c.opt.Attach.Volumes(q) {
				a.vols[u] = v.Driver
			}
		}
		for _, d := range a.vols {
			a.count[d]++
		}
		for u, d := range na.Attached {
			if _, ok := a.vols[u]; !ok {
				a.count[d]++
			}
		}
	}
	c.attached[ni] = a
	return a
}

// attachVolumes: pod p's CSI volumes (nil: none, or not counted).
func (c *Cluster) attachVolumes(p *corev1.Pod) map[string]CSIVolume {
	if c.opt.Attach == nil {
		return nil
	}
	return c.opt.Attach.Volumes(p)
}

// attachMiss: why node ni cannot take a pod's CSI volumes vols, in
// kube-scheduler's words ("" = it can). A volume the node's VolumeAttachments
// alone name counts as attached and as new, as kube-scheduler counts it.
func (c *Cluster) attachMiss(vols map[string]CSIVolume, ni int) string {
	if len(vols) == 0 {
		return ""
	}
	a := c.attachedOn(ni)
	var drivers []string
	for _, v := range vols {
		if (!v.InTree || a.drivers != nil) && !slices.Contains(drivers, v.Driver) {
			drivers = append(drivers, v.Driver)
		}
	}
	sort.Strings(drivers)
	for _, d := range drivers {
		if _, ok := a.drivers[d]; !ok && c.opt.Attach.Required(d) {
			return d + " CSI driver is not installed on the node"
		}
	}
	if !a.limited {
		return ""
	}
	more := map[string]int{}
	for u, v := range vols {
		if _, ok := a.vols[u]; !ok {
			more[v.Driver]++
		}
	}
	for _, d := range drivers {
		if l, ok := a.drivers[d]; ok && l >= 0 && int64(a.count[d]+more[d]) > l {
			return limitWhy
		}
	}
	return ""
}

// attach: node ni has pod's volumes vols attached (Take, once attachMiss
// said it can).
func (c *Cluster) attach(vols map[string]CSIVolume, ni int) {
	if len(vols) == 0 {
		return
	}
	a := c.attachedOn(ni)
	if !a.limited {
		return
	}
	for u, v := range vols {
		if _, ok := a.vols[u]; !ok {
			a.vols[u] = v.Driver
			a.count[v.Driver]++
		}
	}
}

// attachRules: the nodes that cannot take pod p's CSI volumes, by reason.
func (c *Cluster) attachRules(p *corev1.Pod) []rule {
	vols := c.attachVolumes(p)
	if len(vols) == 0 {
		return nil
	}
	byWhy := map[string][]string{}
	for ni, n := range c.Nodes {
		if why := c.attachMiss(vols, ni); why != "" {
			byWhy[why] = append(byWhy[why], n.Name)
		}
	}
	var out []rule
	for _, why := range sortedKeys(byWhy) {
		out = append(out, rule{why, orderLimits, c.exclude(byWhy[why])})
	}
	return out
}

// attachSignature: what tells pods apart by the CSI volumes they attach
// (their drivers, each as often as it attaches one; "" = none), for the
// classes of alike pods: pods that differ only in which volumes are
// counted alike, and Take checks each one's own.
func (o Options) attachSignature(p *corev1.Pod) string {
	if o.Attach == nil {
		return ""
	}
	var ds []string
	for _, v := range o.Attach.Volumes(p) {
		ds = append(ds, fmt.Sprintf("%s:%v", v.Driver, v.InTree))
	}
	sort.Strings(ds)
	out := ""
	for _, d := range ds {
		out += d + ";"
	}
	return out
}
