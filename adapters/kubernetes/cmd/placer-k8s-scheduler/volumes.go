package main

// A pod's PersistentVolumeClaims, as kube-scheduler's VolumeBinding reads
// them. A pod whose claims are bound goes only where their volumes' node
// affinity allows (a local volume's node, a zonal disk's zone). A claim
// of a WaitForFirstConsumer StorageClass with a provisioner waits for the
// scheduler to choose its node: the pod goes where the class's allowed
// topologies allow, and once placed its claims are given the node
// (volume.kubernetes.io/selected-node, which the provisioner reads) while
// the pod holds the node's room, bound once its volumes are there
// (provision). A claim missing, bound to a volume that is not there,
// waiting for the PV controller (Immediate) or for a pre-made volume to be
// chosen (no provisioner: this scheduler does not bind those), or a pod
// that uses ResourceClaims with DRA off, would be bound to a node where it
// cannot start: such a pod stays pending, saying why.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/plan"
	"placer.local/kubernetes/internal/translate"
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
		case !claimBound(c):
			if _, why := s.toProvision(c); why != "" {
				unbound = append(unbound, name+" ("+why+")")
			}
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
		return fmt.Sprintf("placer: pod has unbound PersistentVolumeClaims: %s; it waits until they are bound",
			strings.Join(unbound, ", "))
	}
	return ""
}

func claimBound(c *corev1.PersistentVolumeClaim) bool {
	return c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName != ""
}

// selectedNode: the annotation that gives an unbound claim its node
// (kube-scheduler's PreBind writes it; the provisioner reads it).
const selectedNode = "volume.kubernetes.io/selected-node"

// toProvision: the StorageClass an unbound claim c is to be provisioned
// from on the node this scheduler chooses, or why it is not: a class in
// WaitForFirstConsumer mode with a provisioner, and no volume named.
func (s *scheduler) toProvision(c *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, string) {
	name := storagehelpers.GetPersistentVolumeClaimClass(c)
	if name == "" {
		return nil, "no StorageClass: waiting for a volume to be bound to it"
	}
	class, err := s.classes.Get(name)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("StorageClass %s not found", name)
	case class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || c.Spec.VolumeName != "":
		return nil, fmt.Sprintf("StorageClass %s, Immediate: waiting for the volume to be bound", name)
	case class.Provisioner == "" || class.Provisioner == noProvisioner:
		return nil, fmt.Sprintf("StorageClass %s has no provisioner, and this scheduler does not choose pre-made volumes", name)
	}
	return class, ""
}

// noProvisioner: a StorageClass of pre-made volumes (local volumes, say).
const noProvisioner = "kubernetes.io/no-provisioner"

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

// volumeNodes: where pod p's claims let it go (translate.Options.
// VolumeNodes; nil: anywhere): its bound claims' volumes' node affinity,
// its claims to provision's classes' allowed topologies and the node they
// are being provisioned for. Claims that volumeHold holds the pod for are
// not read: such a pod does not reach a round.
func (s *scheduler) volumeNodes(p *corev1.Pod) *translate.Volumes {
	var v translate.Volumes
	for _, name := range claimNames(p) {
		c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		if err != nil {
			continue
		}
		if claimBound(c) {
			if pv, err := s.pvs.Get(c.Spec.VolumeName); err == nil && pv.Spec.NodeAffinity != nil && pv.Spec.NodeAffinity.Required != nil {
				v.Bound = append(v.Bound, pv.Spec.NodeAffinity.Required)
			}
			continue
		}
		class, _ := s.toProvision(c)
		if class == nil {
			continue
		}
		if sel := topologySelector(class.AllowedTopologies); sel != nil {
			v.Provision = append(v.Provision, sel)
		}
		if n := c.Annotations[selectedNode]; n != "" {
			if v.Node != "" && v.Node != n { // two claims, each given another node: none holds both
				n = v.Node + "," + n
			}
			v.Node = n
		}
	}
	if v.Bound == nil && v.Provision == nil && v.Node == "" {
		return nil
	}
	return &v
}

// topologySelector: a StorageClass's allowed topologies as a node selector
// (nil: anywhere). Terms are ORed, a term's expressions ANDed, each label In
// its values (MatchTopologySelectorTerms).
func topologySelector(terms []corev1.TopologySelectorTerm) *corev1.NodeSelector {
	if len(terms) == 0 {
		return nil
	}
	sel := &corev1.NodeSelector{}
	for _, t := range terms {
		var term corev1.NodeSelectorTerm
		for _, e := range t.MatchLabelExpressions {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: e.Key, Operator: corev1.NodeSelectorOpIn, Values: e.Values})
		}
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, term)
	}
	return sel
}

// provisionTimeout: how long a pod placed holds its node's room while its
// volumes are provisioned there (kube-scheduler's bindTimeoutSeconds).
const provisionTimeout = 10 * time.Minute

// provision: pod b.Pod's claims to provision given node b.Node, before
// its Binding (kube-scheduler's PreBind). wait: some are not bound yet,
// so the pod is not bound now; it holds the node's room (assumed, marked
// provisioning) until they are (snapshot, provisioned), at most
// provisionTimeout.
func (s *scheduler) provision(ctx context.Context, b plan.Bind) (wait bool, err error) {
	var names []string
	for _, name := range claimNames(b.Pod) {
		c, err := s.pvcs.PersistentVolumeClaims(b.Pod.Namespace).Get(name)
		if err != nil || claimBound(c) {
			continue
		}
		if class, _ := s.toProvision(c); class == nil {
			continue
		}
		names = append(names, name)
		if c.Annotations[selectedNode] == b.Node {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{selectedNode: b.Node}}})
		if _, err := s.cs.CoreV1().PersistentVolumeClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return false, fmt.Errorf("giving claim %s its node: %w", c.Name, err)
		}
	}
	if len(names) == 0 {
		return false, nil
	}
	s.mu.Lock()
	if a, ok := s.assumed[b.Pod.UID]; ok {
		a.provisioning = true
		s.assumed[b.Pod.UID] = a
	}
	s.mu.Unlock()
	s.recorder.Eventf(b.Pod, corev1.EventTypeNormal, "WaitingForVolumes", "placer: placed on %s; waiting for its claims (%s) to be provisioned there",
		b.Node, strings.Join(names, ", "))
	return true, nil
}

// provisioned: whether pod p, assumed on a node while its claims are
// provisioned there, should go back to the rounds: its claims are bound
// (the round puts it on its volumes' node), or one is no longer given
// that node (the provisioner gave up on it: kube-scheduler then
// reschedules the pod), or gone.
func (s *scheduler) provisioned(p *corev1.Pod, node string) bool {
	for _, name := range claimNames(p) {
		c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		if err != nil {
			return true
		}
		if !claimBound(c) && c.Annotations[selectedNode] != node {
			if class, _ := s.toProvision(c); class != nil {
				return true
			}
		}
		if !claimBound(c) {
			return false
		}
	}
	return true
}
