package translate

// What kube-scheduler's NodeDeclaredFeatures checks (GA in 1.37): a pod
// that uses a feature its node's kubelet may not have (the registry of
// k8s.io/component-helpers/nodedeclaredfeatures: a container's
// restartPolicyRules action RestartAllContainers, the resize of pod-level
// resources, ...) goes only to nodes that declare it in
// status.declaredFeatures, so that nodes older than the control plane, in an
// upgrade, are left out for it.

import (
	corev1 "k8s.io/api/core/v1"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
)

// kube-scheduler's reason for a node that lacks a feature a pod needs.
const featuresWhy = "node(s) didn't match Pod's required features"

// requiredFeatures: the features pod p needs of its node, for the
// control plane's version (Options.ControlPlane; nil: none read).
func (o Options) requiredFeatures(p *corev1.Pod) (ndf.FeatureSet, bool) {
	if o.ControlPlane == nil {
		return ndf.FeatureSet{}, false
	}
	reqs, err := ndf.DefaultFramework.InferForPodScheduling(&ndf.PodInfo{Spec: &p.Spec}, o.ControlPlane)
	if err != nil || reqs.IsEmpty() {
		return ndf.FeatureSet{}, false
	}
	return reqs, true
}

// featureRules: the nodes that do not declare a feature pod p needs.
func (c *Cluster) featureRules(p *corev1.Pod) []rule {
	reqs, ok := c.opt.requiredFeatures(p)
	if !ok {
		return nil
	}
	var lack []string
	for _, n := range c.Nodes {
		if m, err := ndf.DefaultFramework.MatchNode(reqs, n); err != nil || !m.IsMatch {
			lack = append(lack, n.Name)
		}
	}
	if len(lack) == 0 {
		return nil
	}
	return []rule{{featuresWhy, orderFeatures, c.exclude(lack)}}
}

// featureSignature: what tells pods apart by the features they need ("" =
// none), for the classes of alike pods (kube-scheduler's SignPod).
func (o Options) featureSignature(p *corev1.Pod) string {
	if reqs, ok := o.requiredFeatures(p); ok {
		return reqs.String()
	}
	return ""
}
