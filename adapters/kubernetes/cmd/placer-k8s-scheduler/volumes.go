package main

// A pod's PersistentVolumeClaims, as kube-scheduler's VolumeBinding reads
// them. A pod whose claims are bound goes only where their volumes' node
// affinity allows (a local volume's node, a zonal disk's zone). A claim
// of a WaitForFirstConsumer StorageClass waits for the scheduler to choose
// its node: with a provisioner, the pod goes where the class's allowed
// topologies allow, and once placed its claims are given the node
// (volume.kubernetes.io/selected-node, which the provisioner reads);
// without one (pre-made volumes: local disks), the pod goes where an
// available volume would take each claim, and once placed each claim is
// given one (the volume's claimRef, which the PV controller completes).
// Either way the pod holds the node's room until its claims are bound, then
// is bound there (provision). A claim missing, bound to a volume that is
// not there, or waiting for the PV controller (Immediate), or a pod that
// uses ResourceClaims with DRA off, would be bound to a node where it
// cannot start: such a pod stays pending, saying why.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/storage/ephemeral"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

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
	for _, name := range translate.ClaimNames(p) {
		c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		var notOurs error // a generic ephemeral volume's claim another pod owns (kube-scheduler's VolumeBinding refuses it)
		if err == nil && ephemeralOf(p, name) {
			notOurs = ephemeral.VolumeIsForPod(p, c)
		}
		switch {
		case err != nil:
			missing = append(missing, fmt.Sprintf("persistentvolumeclaim %q not found", name))
		case notOurs != nil:
			missing = append(missing, notOurs.Error())
		case c.DeletionTimestamp != nil:
			missing = append(missing, fmt.Sprintf("persistentvolumeclaim %q is being deleted", name))
		case !claimBound(c):
			if _, why := s.delayed(c); why != "" {
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

// ephemeralOf: whether claim `name` is one of pod p's generic ephemeral
// volumes', which its pod must own.
func ephemeralOf(p *corev1.Pod, name string) bool {
	for i := range p.Spec.Volumes {
		if v := &p.Spec.Volumes[i]; v.Ephemeral != nil && ephemeral.VolumeClaimName(p, v) == name {
			return true
		}
	}
	return false
}

// soloClaims: pod p's claims of access mode ReadWriteOncePod
// (translate.Options.SoloClaims).
func (s *scheduler) soloClaims(p *corev1.Pod) []string {
	var out []string
	for _, name := range translate.ClaimNames(p) {
		if c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name); err == nil && slices.Contains(c.Spec.AccessModes, corev1.ReadWriteOncePod) {
			out = append(out, name)
		}
	}
	return out
}

// claimBound: whether claim c is bound, as kube-scheduler's VolumeBinding
// reads it (isPVCFullyBound): a volume named and the PV controller's
// binding done (its annotation, written with the volume's name or after
// it; the claim's phase follows).
func claimBound(c *corev1.PersistentVolumeClaim) bool {
	return c.Spec.VolumeName != "" && metav1.HasAnnotation(c.ObjectMeta, bindCompleted)
}

// bindCompleted: the annotation the PV controller gives a claim it has bound.
const bindCompleted = "pv.kubernetes.io/bind-completed"

// selectedNode: the annotation that gives an unbound claim its node
// (kube-scheduler's PreBind writes it; the provisioner reads it).
const selectedNode = "volume.kubernetes.io/selected-node"

// delayed: the StorageClass of an unbound claim c that waits for the node
// this scheduler chooses, or why it does not: a class in
// WaitForFirstConsumer mode, and no volume named. Without a provisioner
// (premade), its volumes are pre-made; with one, one is provisioned.
func (s *scheduler) delayed(c *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, string) {
	name := storagehelpers.GetPersistentVolumeClaimClass(c)
	if name == "" {
		return nil, "no StorageClass: waiting for a volume to be bound to it"
	}
	class, err := s.classes.Get(name)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("StorageClass %s not found", name)
	case c.Spec.VolumeName != "": // named by its author: the PV controller binds it
		return nil, fmt.Sprintf("waiting for persistentvolume %q to be bound to it", c.Spec.VolumeName)
	case class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer:
		return nil, fmt.Sprintf("StorageClass %s, Immediate: waiting for the volume to be bound", name)
	}
	return class, ""
}

// byClass: the PersistentVolume informer's index by StorageClass.
const byClass = "class"

// premade: whether a WaitForFirstConsumer class's volumes are pre-made
// (local volumes, say): it has no provisioner.
func premade(class *storagev1.StorageClass) bool {
	return class.Provisioner == "" || class.Provisioner == "kubernetes.io/no-provisioner"
}

// candidates: the pre-made volumes of claim c's class that could take it
// on some node, smallest first: kube-scheduler's FindMatchingVolume less
// the node (available, of its size, access modes, volume mode, attributes
// class and selector); a volume given c already (its claimRef), alone
// (given).
func (s *scheduler) candidates(c *corev1.PersistentVolumeClaim, class string) (vols []*corev1.PersistentVolume, given bool) {
	ofClass, _ := s.pvClass.ByIndex(byClass, class)
	var out []*corev1.PersistentVolume
	var sel labels.Selector
	if c.Spec.Selector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(c.Spec.Selector); err != nil {
			return nil, false
		}
	}
	want := c.Spec.Resources.Requests[corev1.ResourceStorage]
	for _, o := range ofClass {
		pv, ok := o.(*corev1.PersistentVolume)
		if !ok || pv.DeletionTimestamp != nil {
			continue
		}
		if storagehelpers.IsVolumeBoundToClaim(pv, c) {
			return []*corev1.PersistentVolume{pv}, true
		}
		size := pv.Spec.Capacity[corev1.ResourceStorage]
		if pv.Spec.ClaimRef != nil || pv.Status.Phase != corev1.VolumeAvailable || size.Cmp(want) < 0 ||
			storagehelpers.CheckVolumeModeMismatches(&c.Spec, &pv.Spec) || !storagehelpers.CheckAccessModes(c, pv) ||
			ptr.Deref(c.Spec.VolumeAttributesClassName, "") != ptr.Deref(pv.Spec.VolumeAttributesClassName, "") ||
			(sel != nil && !sel.Matches(labels.Set(pv.Labels))) {
			continue
		}
		out = append(out, pv)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Spec.Capacity[corev1.ResourceStorage], out[j].Spec.Capacity[corev1.ResourceStorage]
		if d := a.Cmp(b); d != 0 {
			return d < 0
		}
		return out[i].Name < out[j].Name
	})
	return out, false
}

// volumeNodes: where pod p's claims let it go (translate.Options.
// VolumeNodes; nil: anywhere): its bound claims' volumes' node affinity;
// for its claims to provision, their classes' allowed topologies, their
// drivers' storage capacity and the node they are being provisioned for;
// for its claims of pre-made volumes, the volumes that could take them.
// Claims that volumeHold holds the pod for are not read: such a pod does
// not reach a round.
func (s *scheduler) volumeNodes(p *corev1.Pod) *translate.Volumes {
	var v translate.Volumes
	for _, name := range translate.ClaimNames(p) {
		c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		if err != nil {
			continue
		}
		if claimBound(c) {
			if pv, err := s.pvs.Get(c.Spec.VolumeName); err == nil {
				if pv.Spec.NodeAffinity != nil && pv.Spec.NodeAffinity.Required != nil {
					v.Bound = append(v.Bound, pv.Spec.NodeAffinity.Required)
				}
				v.Zone = append(v.Zone, zoneSelectors(pv)...)
			}
			continue
		}
		class, _ := s.delayed(c)
		if class == nil {
			continue
		}
		if premade(class) {
			vols, given := s.candidates(c, class.Name)
			pm := translate.PreMade{Claim: name, Volumes: vols}
			key, _ := json.Marshal(c.Spec) // alike claims: the same volumes could take each
			pm.Key = string(key)
			if given {
				pm.Key += "|" + vols[0].Name
			}
			v.PreMade = append(v.PreMade, pm)
			continue
		}
		if sel := topologySelector(class.AllowedTopologies); sel != nil {
			v.Provision = append(v.Provision, sel)
		}
		if sel := s.capacity(c, class); sel != nil {
			v.Capacity = append(v.Capacity, sel)
		}
		if n := c.Annotations[selectedNode]; n != "" {
			if v.Node != "" && v.Node != n { // two claims, each given another node: none holds both
				n = v.Node + "," + n
			}
			v.Node = n
		}
	}
	if v.Bound == nil && v.Provision == nil && v.Capacity == nil && v.Node == "" && v.PreMade == nil && v.Zone == nil {
		return nil
	}
	return &v
}

// zoneLabels: the labels kube-scheduler's VolumeZone reads on a volume
// and on the nodes, and their GA names.
var zoneLabels = [][2]string{
	{corev1.LabelFailureDomainBetaZone, corev1.LabelTopologyZone},
	{corev1.LabelFailureDomainBetaRegion, corev1.LabelTopologyRegion},
	{corev1.LabelTopologyZone, corev1.LabelTopologyZone},
	{corev1.LabelTopologyRegion, corev1.LabelTopologyRegion},
}

// zoneSelectors: where volume pv's zone and region labels let a pod go
// (kube-scheduler's VolumeZone), one selector a label: a node without
// any of zoneLabels, one whose label is among the volume's values ("__"
// between them), or, without it, whose label's GA name is. A value with
// an empty zone is not read, as VolumeZone skips it.
func zoneSelectors(pv *corev1.PersistentVolume) []*corev1.NodeSelector {
	var out []*corev1.NodeSelector
	for _, l := range zoneLabels {
		value, ok := pv.Labels[l[0]]
		if !ok {
			continue
		}
		var zones []string
		for _, z := range strings.Split(value, "__") {
			if z = strings.TrimSpace(z); z == "" {
				zones = nil
				break
			}
			zones = append(zones, z)
		}
		if zones == nil {
			continue
		}
		var none corev1.NodeSelectorTerm
		for _, k := range zoneLabels {
			none.MatchExpressions = append(none.MatchExpressions, corev1.NodeSelectorRequirement{Key: k[0], Operator: corev1.NodeSelectorOpDoesNotExist})
		}
		terms := []corev1.NodeSelectorTerm{none, {MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: l[0], Operator: corev1.NodeSelectorOpIn, Values: zones}}}}
		if l[1] != l[0] {
			terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: l[0], Operator: corev1.NodeSelectorOpDoesNotExist}, {Key: l[1], Operator: corev1.NodeSelectorOpIn, Values: zones}}})
		}
		out = append(out, &corev1.NodeSelector{NodeSelectorTerms: terms})
	}
	return out
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

// capacity: where claim c, to be provisioned from class, fits by the
// storage capacity its CSI driver publishes (kube-scheduler's
// hasEnoughCapacity): the node topologies of the CSIStorageCapacity
// objects of its class whose maximum volume size, else capacity, holds
// its request. nil: anywhere (no request, or a driver that does not
// track capacity); no term: nowhere.
func (s *scheduler) capacity(c *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) *corev1.NodeSelector {
	want, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || want.IsZero() {
		return nil
	}
	d, err := s.drivers.Get(class.Provisioner)
	if err != nil || d.Spec.StorageCapacity == nil || !*d.Spec.StorageCapacity {
		return nil
	}
	all, _ := s.capacities.List(labels.Everything())
	sel := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{}}
	for _, cp := range all {
		limit := cp.Capacity
		if cp.MaximumVolumeSize != nil {
			limit = cp.MaximumVolumeSize
		}
		if cp.StorageClassName != class.Name || limit == nil || limit.Cmp(want) < 0 || cp.NodeTopology == nil {
			continue
		}
		if len(cp.NodeTopology.MatchLabels) == 0 && len(cp.NodeTopology.MatchExpressions) == 0 {
			return nil // every node
		}
		var term corev1.NodeSelectorTerm
		for _, k := range slices.Sorted(maps.Keys(cp.NodeTopology.MatchLabels)) {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn,
				Values: []string{cp.NodeTopology.MatchLabels[k]}})
		}
		for _, e := range cp.NodeTopology.MatchExpressions { // In, NotIn, Exists, DoesNotExist: the same words
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: e.Key,
				Operator: corev1.NodeSelectorOperator(e.Operator), Values: e.Values})
		}
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, term)
	}
	return sel
}

// provisionTimeout: how long a pod placed holds its node's room while its
// volumes are provisioned there (kube-scheduler's bindTimeoutSeconds).
const provisionTimeout = 10 * time.Minute

// provision: pod b.Pod's claims that wait for its node given it, before
// its Binding (kube-scheduler's PreBind): a claim to provision the node
// (its selected-node annotation), a claim of pre-made volumes the volume
// Take chose on it (the volume's claimRef, kube-scheduler's
// bindAPIUpdate; the PV controller then binds the claim). wait: some are
// not bound yet, so the pod is not bound now; it holds the node's room
// (assumed, marked provisioning) until they are (snapshot, provisioned),
// at most provisionTimeout.
func (s *scheduler) provision(ctx context.Context, b plan.Bind) (wait bool, err error) {
	var names []string
	for _, name := range translate.ClaimNames(b.Pod) {
		c, err := s.pvcs.PersistentVolumeClaims(b.Pod.Namespace).Get(name)
		if err != nil || claimBound(c) {
			continue
		}
		class, _ := s.delayed(c)
		if class == nil {
			continue
		}
		names = append(names, name)
		if premade(class) {
			if err := s.giveVolume(ctx, c, b.Volumes[name]); err != nil {
				return false, fmt.Errorf("giving claim %s its volume: %w", c.Name, err)
			}
			continue
		}
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
	s.recorder.Eventf(b.Pod, corev1.EventTypeNormal, "WaitingForVolumes", "placer: placed on %s; waiting for its claims (%s) to be bound there",
		b.Node, strings.Join(names, ", "))
	return true, nil
}

// waitingForVolumes: the pods placed whose claims wait to be bound on
// their node (provision), for /metrics.
func (s *scheduler) waitingForVolumes() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.assumed {
		if a.provisioning {
			n++
		}
	}
	return float64(n)
}

// giveVolume: pre-made volume `name` given claim c, unless it is already.
// The update carries the volume's resourceVersion as the informer saw it,
// so a volume given another claim meanwhile refuses it (Conflict).
func (s *scheduler) giveVolume(ctx context.Context, c *corev1.PersistentVolumeClaim, name string) error {
	if name == "" {
		return fmt.Errorf("no volume chosen")
	}
	pv, err := s.pvs.Get(name)
	if err != nil {
		return err
	}
	if storagehelpers.IsVolumeBoundToClaim(pv, c) {
		return nil
	}
	given, _, err := storagehelpers.GetBindVolumeToClaim(pv, c)
	if err != nil {
		return err
	}
	_, err = s.cs.CoreV1().PersistentVolumes().Update(ctx, given, metav1.UpdateOptions{})
	return err
}

// provisioned: whether pod p, assumed on a node while its claims are
// bound there, should go back to the rounds: its claims are bound (the
// round puts it on its volumes' node), or one is no longer given that
// node or a volume (the provisioner gave up on it, another claim took the
// volume: kube-scheduler then reschedules the pod), or gone.
func (s *scheduler) provisioned(p *corev1.Pod, node string) bool {
	waiting := false
	for _, name := range translate.ClaimNames(p) {
		c, err := s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		if err != nil {
			return true
		}
		if claimBound(c) {
			continue
		}
		class, _ := s.delayed(c)
		switch {
		case class == nil:
			waiting = true
		case premade(class):
			if _, given := s.candidates(c, class.Name); !given {
				return true
			}
			waiting = true
		case c.Annotations[selectedNode] != node:
			return true
		default:
			waiting = true
		}
	}
	return !waiting
}
