package main

// Claims this scheduler does not handle yet: a pod whose
// PersistentVolumeClaim is not bound (a StorageClass with volumeBindingMode
// WaitForFirstConsumer waits for the scheduler to choose the node; this one
// does not provision nor bind volumes), bound to a PersistentVolume that
// does not exist, or that uses ResourceClaims with DRA off, would be bound to
// a node where it cannot start. Such a pod stays pending, saying why. A pod
// whose claims are bound goes only where their volumes' node affinity
// allows (volumeNodes; a local volume's node, a zonal disk's zone), as
// kube-scheduler's VolumeBinding.

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"placer.local/kubernetes/internal/dra"
)

// volumeHold: why pod p waits out of the rounds for its claims ("" = it
// does not); ds: the cycle's devices and claims (nil: DRA off when the
// cycle began, whatever it is now).
func (s *scheduler) volumeHold(ds *dra.Snapshot, p *corev1.Pod) string {
	if len(p.Spec.ResourceClaims) > 0 && ds == nil {
		var names []string
		for _, c := range p.Spec.ResourceClaims {
			names = append(names, c.Name)
		}
		why := draNotServed
		if !s.cfg.dra {
			why = "--dra is off"
		}
		return fmt.Sprintf("placer: the pod uses ResourceClaims (%s) and %s, so this scheduler leaves the pod pending rather than bind it where its claims are not allocated",
			strings.Join(names, ", "), why)
	}
	var missing, unbound []string
	for _, name := range claimNames(p) {
		c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		switch {
		case err != nil:
			missing = append(missing, fmt.Sprintf("persistentvolumeclaim %q not found", name))
		case c.DeletionTimestamp != nil:
			missing = append(missing, fmt.Sprintf("persistentvolumeclaim %q is being deleted", name))
		case c.Status.Phase != corev1.ClaimBound || c.Spec.VolumeName == "":
			mode := ""
			if c.Spec.StorageClassName != nil {
				mode = " (StorageClass " + *c.Spec.StorageClassName + ")"
			}
			unbound = append(unbound, name+mode)
		default:
			if _, err := s.pvs.Get(c.Spec.VolumeName); err != nil {
				missing = append(missing, fmt.Sprintf("persistentvolumeclaim %q is bound to persistentvolume %q, which does not exist", name, c.Spec.VolumeName))
			}
		}
	}
	sort.Strings(missing)
	switch {
	case len(missing) > 0:
		return "placer: " + strings.Join(missing, ", ")
	case len(unbound) > 0:
		return fmt.Sprintf("placer: pod has unbound PersistentVolumeClaims: %s; this scheduler does not bind nor provision volumes, so it waits until the claims are bound",
			strings.Join(unbound, ", "))
	}
	return ""
}

// claimNames: the PersistentVolumeClaims pod p mounts, its generic
// ephemeral volumes' (<pod>-<volume>) among them.
func claimNames(p *corev1.Pod) []string {
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

// volumeNodes: the required node affinity of the PersistentVolumes pod
// p's bound claims use (translate.Options.VolumeNodes). Claims not bound,
// or volumes not there, are volumeHold's: such a pod does not reach a round.
func (s *scheduler) volumeNodes(p *corev1.Pod) []*corev1.NodeSelector {
	var out []*corev1.NodeSelector
	for _, name := range claimNames(p) {
		c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		if err != nil || c.Spec.VolumeName == "" {
			continue
		}
		pv, err := s.pvs.Get(c.Spec.VolumeName)
		if err != nil || pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
			continue
		}
		out = append(out, pv.Spec.NodeAffinity.Required)
	}
	return out
}
