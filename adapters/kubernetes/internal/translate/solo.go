package translate

// What kube-scheduler's VolumeRestrictions checks of a claim of access
// mode ReadWriteOncePod: one pod uses it. A pod whose such claim a pod on
// a node uses (bound by anyone, or placed this cycle) fits no node; of the
// pods of one round that share one, the first Take accepts takes it, in
// queue order, and the others go to the next round, where the claim is in
// use. Pending pods do not hold a claim from one another: one that cannot
// be placed for another reason leaves it to the next.

import (
	corev1 "k8s.io/api/core/v1"
)

// kube-scheduler's reason, for every node that passes the filters before it.
const soloWhy = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"

// ClaimNames: the PersistentVolumeClaims pod p mounts, its generic
// ephemeral volumes' (<pod>-<volume>) among them.
func ClaimNames(p *corev1.Pod) []string {
	var out []string
	for _, v := range p.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, p.Name+"-"+v.Name)
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

// soloRules: every node, where one of pod p's ReadWriteOncePod claims is in use.
func (c *Cluster) soloRules(p *corev1.Pod) []rule {
	if !c.soloTaken(p) {
		return nil
	}
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	return []rule{{soloWhy, orderRestrictions, c.exclude(names)}}
}
