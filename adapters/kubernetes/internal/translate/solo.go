package translate

// What kube-scheduler's VolumeRestrictions checks. A claim of access mode
// ReadWriteOncePod is one pod's: a pod whose such claim a pod on a node
// uses (bound by anyone, or placed this cycle) fits no node; of the pods
// of one round that share one, the first Take accepts takes it, in queue
// order, and the others go to the next round, where the claim is in use.
// Pending pods do not hold a claim from one another: one that cannot be
// placed for another reason leaves it to the next. And an in-tree disk
// named in the pod itself (a GCE PD, an EBS volume, an iSCSI target, an
// RBD image) is one node's pod's, unless every pod mounts it read-only
// (an EBS volume: in any case): a node with a pod that mounts it is no
// other's (checked first).

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/storage/ephemeral"
)

// kube-scheduler's reasons, for the nodes that pass the filters before it.
const (
	soloWhy = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
	diskWhy = "node(s) had no available disk"
)

// ClaimNames: the PersistentVolumeClaims pod p mounts, its generic
// ephemeral volumes' (<pod>-<volume>) among them.
func ClaimNames(p *corev1.Pod) []string {
	var out []string
	for i := range p.Spec.Volumes {
		switch v := &p.Spec.Volumes[i]; {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, ephemeral.VolumeClaimName(p, v))
		}
	}
	return out
}

// soloTaken: whether a claim of pod p's of access mode ReadWriteOncePod
// is in use by a pod on a node (or one Take gave a node this round).
func (c *Cluster) soloTaken(p *corev1.Pod) bool {
	if c.opt.SoloClaims == nil {
		return false
	}
	mine := c.opt.SoloClaims(p)
	if len(mine) == 0 {
		return false
	}
	if c.inUse == nil {
		c.inUse = map[string]bool{}
		for _, on := range c.on {
			for _, q := range on {
				for _, n := range ClaimNames(q) {
					c.inUse[q.Namespace+"/"+n] = true
				}
			}
		}
	}
	for _, n := range mine {
		if c.inUse[p.Namespace+"/"+n] {
			return true
		}
	}
	return false
}

// takeSolo: pod p, placed (Take), uses its ReadWriteOncePod claims.
func (c *Cluster) takeSolo(p *corev1.Pod) {
	if c.inUse == nil {
		return // (no pod of the round has such a claim: soloTaken never read them)
	}
	for _, n := range ClaimNames(p) {
		c.inUse[p.Namespace+"/"+n] = true
	}
}

// restrictionRules: the nodes where one of pod p's in-tree disks is in
// use; every other node, where one of its ReadWriteOncePod claims is.
func (c *Cluster) restrictionRules(p *corev1.Pod) []rule {
	taken := c.soloTaken(p)
	if !taken && !hasDisks(p) {
		return nil
	}
	var disks, rest []string
	for i, n := range c.Nodes {
		switch {
		case c.diskTaken(p, i):
			disks = append(disks, n.Name)
		case taken:
			rest = append(rest, n.Name)
		}
	}
	var out []rule
	if len(disks) > 0 {
		out = append(out, rule{diskWhy, orderRestrictions, c.exclude(disks)})
	}
	if len(rest) > 0 {
		out = append(out, rule{soloWhy, orderRestrictions, c.exclude(rest)})
	}
	return out
}

// diskTaken: whether an in-tree disk of pod p's is in use on node ni, by a
// pod bound there or one Take gave it this round (isVolumeConflict).
func (c *Cluster) diskTaken(p *corev1.Pod, ni int) bool {
	if !hasDisks(p) {
		return false
	}
	for _, on := range [][]*corev1.Pod{c.on[ni], c.took[ni]} {
		for _, q := range on {
			if disksClash(p, q) {
				return true
			}
		}
	}
	return false
}

// hasDisks: whether pod p names an in-tree disk VolumeRestrictions reads.
func hasDisks(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.GCEPersistentDisk != nil || v.AWSElasticBlockStore != nil || v.ISCSI != nil || v.RBD != nil {
			return true
		}
	}
	return false
}

// disksClash: whether pods p and q mount one in-tree disk, not both
// read-only (an EBS volume: at all).
func disksClash(p, q *corev1.Pod) bool {
	for _, a := range p.Spec.Volumes {
		for _, b := range q.Spec.Volumes {
			switch {
			case a.GCEPersistentDisk != nil && b.GCEPersistentDisk != nil:
				if a.GCEPersistentDisk.PDName == b.GCEPersistentDisk.PDName && !(a.GCEPersistentDisk.ReadOnly && b.GCEPersistentDisk.ReadOnly) {
					return true
				}
			case a.AWSElasticBlockStore != nil && b.AWSElasticBlockStore != nil:
				if a.AWSElasticBlockStore.VolumeID == b.AWSElasticBlockStore.VolumeID {
					return true
				}
			case a.ISCSI != nil && b.ISCSI != nil:
				if a.ISCSI.IQN == b.ISCSI.IQN && !(a.ISCSI.ReadOnly && b.ISCSI.ReadOnly) {
					return true
				}
			case a.RBD != nil && b.RBD != nil:
				if slices.ContainsFunc(a.RBD.CephMonitors, func(m string) bool { return slices.Contains(b.RBD.CephMonitors, m) }) &&
					a.RBD.RBDPool == b.RBD.RBDPool && a.RBD.RBDImage == b.RBD.RBDImage && !(a.RBD.ReadOnly && b.RBD.ReadOnly) {
					return true
				}
			}
		}
	}
	return false
}
