package translate

// Pod rules as node requirements: required pod affinity and anti-affinity
// on any topology key (and the anti-affinity of the pods already on the
// nodes, which kube-scheduler applies symmetrically), topology spread
// constraints with whenUnsatisfiable DoNotSchedule, host ports, side
// resources (side.go), in-tree disks and ReadWriteOncePod claims in use
// (solo.go), CSI attach limits (attach.go), where the pod's volumes may be
// (volumeRules) and the node features it needs (features.go) become
// requirements on node labels (the topology key's values, or the round's
// NodeLabel), computed against the pods the Cluster holds, with
// kube-scheduler's meaning (its InterPodAffinity, PodTopologySpread,
// NodePorts, NodeResourcesFit, VolumeRestrictions, NodeVolumeLimits,
// VolumeBinding, VolumeZone and NodeDeclaredFeatures filters). The
// preferred forms (preferred pod affinity and anti-affinity, ScheduleAnyway
// spread) become preferred node terms with their weights, which Placer
// scores.
//
// Placer then places each job only on the nodes those requirements admit.
// Pods of one round whose rules refer to one another are not placed in the
// same round: the planner (internal/plan) puts them in successive rounds,
// each computed against the placements of the ones before (Interact).

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// kube-scheduler's reasons (its filter plugins' words), and the order of
// its filters, which explain.go follows when a node fails several.
const (
	existingAntiWhy = "node(s) didn't satisfy existing pods anti-affinity rules"
	affinityWhy     = "node(s) didn't match pod affinity rules"
	antiWhy         = "node(s) didn't match pod anti-affinity rules"
	spreadWhy       = "node(s) didn't match pod topology spread constraints"
	spreadLabelWhy  = spreadWhy + " (missing required label)"
	volumeWhy       = "node(s) had volume node affinity conflict"
	provisionWhy    = "node(s) didn't find available persistent volumes to bind"
	storageWhy      = "node(s) did not have enough free storage"
	zoneWhy         = "node(s) had no available volume zone"

	orderPorts        = 3  // NodePorts
	orderSide         = 4  // NodeResourcesFit, after Placer's CPU, memory and GPUs
	orderRestrictions = 5  // VolumeRestrictions
	orderLimits       = 6  // NodeVolumeLimits
	orderVolumes      = 7  // VolumeBinding, VolumeZone
	orderSpread       = 8  // PodTopologySpread
	orderAffinity     = 9  // InterPodAffinity
	orderClaims       = 10 // DynamicResources
	orderFeatures     = 11 // NodeDeclaredFeatures
)

// rule: a node requirement of a job, and kube-scheduler's reason for the
// nodes it excludes.
type rule struct {
	why   string
	order int
	req   *wire.SelectorRequirementT
}

func notIn(key string, values []string) *wire.SelectorRequirementT {
	return &wire.SelectorRequirementT{Key: key, Operator: wire.SelectorOperatorNotIn, Values: values}
}

func in(key string, values []string) *wire.SelectorRequirementT {
	if len(values) == 0 {
		values = []string{none}
	}
	return &wire.SelectorRequirementT{Key: key, Operator: wire.SelectorOperatorIn, Values: values}
}

// affinityTerm: a pod affinity term as kube-scheduler reads it: the
// namespaces it covers (listed, the pod's own when neither they nor a
// selector are given, or those a namespaceSelector matches), the label
// selector (with matchLabelKeys and mismatchLabelKeys merged), the key.
type affinityTerm struct {
	namespaces map[string]bool
	nsSel      labels.Selector
	sel        labels.Selector
	key        string
	weight     int32
}

func newTerm(p *corev1.Pod, t *corev1.PodAffinityTerm) (affinityTerm, error) {
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil {
		return affinityTerm{}, err
	}
	if sel, err = withLabelKeys(sel, p, t.MatchLabelKeys, selection.In); err != nil {
		return affinityTerm{}, err
	}
	if sel, err = withLabelKeys(sel, p, t.MismatchLabelKeys, selection.NotIn); err != nil {
		return affinityTerm{}, err
	}
	nsSel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector) // nil: none (labels.Nothing)
	if err != nil {
		return affinityTerm{}, err
	}
	ns := map[string]bool{}
	if len(t.Namespaces) == 0 && t.NamespaceSelector == nil {
		ns[p.Namespace] = true
	}
	for _, n := range t.Namespaces {
		ns[n] = true
	}
	return affinityTerm{namespaces: ns, nsSel: nsSel, sel: sel, key: t.TopologyKey}, nil
}

// withLabelKeys: sel and, for each of keys the pod has, key op [its value]
// (matchLabelKeys: In, mismatchLabelKeys: NotIn), as the API server merges them.
func withLabelKeys(sel labels.Selector, p *corev1.Pod, keys []string, op selection.Operator) (labels.Selector, error) {
	for _, k := range keys {
		if v, ok := p.Labels[k]; ok {
			r, err := labels.NewRequirement(k, op, []string{v})
			if err != nil {
				return nil, err
			}
			sel = sel.Add(*r)
		}
	}
	return sel, nil
}

func (t *affinityTerm) matches(q *corev1.Pod, nsLabels func(string) map[string]string) bool {
	if !t.namespaces[q.Namespace] { // else its namespace's labels, by the namespaceSelector (none: labels.Nothing)
		var l map[string]string
		if nsLabels != nil {
			l = nsLabels(q.Namespace)
		}
		if !t.nsSel.Matches(labels.Set(l)) {
			return false
		}
	}
	return t.sel.Matches(labels.Set(q.Labels))
}

// podTerms: a pod's pod affinity terms of one kind (errors skipped:
// rulesProblem reports them before a round).
func podTerms(p *corev1.Pod, anti, preferred bool) []affinityTerm {
	a := p.Spec.Affinity
	if a == nil {
		return nil
	}
	var req []corev1.PodAffinityTerm
	var pref []corev1.WeightedPodAffinityTerm
	switch {
	case anti && a.PodAntiAffinity != nil:
		req, pref = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	case !anti && a.PodAffinity != nil:
		req, pref = a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	}
	var out []affinityTerm
	if !preferred {
		for i := range req {
			if t, err := newTerm(p, &req[i]); err == nil {
				out = append(out, t)
			}
		}
		return out
	}
	for i := range pref {
		if t, err := newTerm(p, &pref[i].PodAffinityTerm); err == nil {
			t.weight = pref[i].Weight
			out = append(out, t)
		}
	}
	return out
}

func hasAnti(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	return a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
}

// spreadConstraint: a topology spread constraint as kube-scheduler reads it.
type spreadConstraint struct {
	corev1.TopologySpreadConstraint
	sel labels.Selector
}

func spreadConstraints(p *corev1.Pod, hard bool) []spreadConstraint {
	var out []spreadConstraint
	for _, c := range p.Spec.TopologySpreadConstraints {
		if (c.WhenUnsatisfiable == corev1.DoNotSchedule) != hard {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			continue
		}
		if sel, err = withLabelKeys(sel, p, c.MatchLabelKeys, selection.In); err != nil {
			continue
		}
		out = append(out, spreadConstraint{c, sel})
	}
	return out
}

// rulesProblem: why a pod's pod rules cannot be read ("" = they can).
func rulesProblem(p *corev1.Pod) string {
	if a := p.Spec.Affinity; a != nil {
		var all []corev1.PodAffinityTerm
		if a.PodAffinity != nil {
			all = append(all, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
			for _, w := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				all = append(all, w.PodAffinityTerm)
			}
		}
		if a.PodAntiAffinity != nil {
			all = append(all, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
			for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				all = append(all, w.PodAffinityTerm)
			}
		}
		for i := range all {
			if _, err := newTerm(p, &all[i]); err != nil {
				return "pod affinity term: " + err.Error()
			}
			if all[i].TopologyKey == "" {
				return "pod affinity term without a topologyKey"
			}
		}
	}
	for _, c := range p.Spec.TopologySpreadConstraints {
		if _, err := metav1.LabelSelectorAsSelector(c.LabelSelector); err != nil {
			return "topology spread constraint: " + err.Error()
		}
		if c.TopologyKey == "" || c.MaxSkew < 1 {
			return "topology spread constraint without a topologyKey or with maxSkew < 1"
		}
	}
	return ""
}

// Interact: whether pods p and q, both to be placed, constrain each
// other: distinct when only as "not on the same node" (required
// anti-affinity on kubernetes.io/hostname, or a host port both ask),
// which one job with distinct_nodes expresses; other for any other rule
// (affinity, anti-affinity on a wider key, spread), which the planner
// resolves by placing them in successive rounds.
func Interact(p, q *corev1.Pod, nsLabels func(string) map[string]string) (distinct, other bool) {
	for _, pair := range [2][2]*corev1.Pod{{p, q}, {q, p}} {
		a, b := pair[0], pair[1]
		for _, t := range podTerms(a, true, false) {
			if t.matches(b, nsLabels) {
				if t.key == HostnameKey {
					distinct = true
				} else {
					other = true
				}
			}
		}
		for _, t := range podTerms(a, false, false) {
			if t.matches(b, nsLabels) {
				other = true
			}
		}
		for _, c := range spreadConstraints(a, true) {
			if b.Namespace == a.Namespace && !c.sel.Empty() && c.sel.Matches(labels.Set(b.Labels)) {
				other = true
			}
		}
	}
	if PortsClash(p, q) {
		distinct = true
	}
	return distinct, other
}

// HasRules: whether a pod has rules another pod's placement may change
// (required pod affinity or anti-affinity, DoNotSchedule spread, host ports).
func HasRules(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	if a != nil && ((a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) || hasAnti(p)) {
		return true
	}
	return len(spreadConstraints(p, true)) > 0 || len(HostPorts(p)) > 0
}

// RuleKeys: the label keys the rules of `pods` select on (the labels that
// matter when telling whether two pods are alike).
func RuleKeys(pods []*corev1.Pod) map[string]bool {
	keys := map[string]bool{}
	add := func(s *metav1.LabelSelector, extra []string) {
		for _, k := range extra {
			keys[k] = true
		}
		if s == nil {
			return
		}
		for k := range s.MatchLabels {
			keys[k] = true
		}
		for _, e := range s.MatchExpressions {
			keys[e.Key] = true
		}
	}
	for _, p := range pods {
		if a := p.Spec.Affinity; a != nil {
			for _, pa := range []*corev1.PodAffinity{a.PodAffinity} {
				if pa == nil {
					continue
				}
				for _, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
					add(t.LabelSelector, append(t.MatchLabelKeys, t.MismatchLabelKeys...))
				}
				for _, t := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
					add(t.PodAffinityTerm.LabelSelector, nil)
				}
			}
			if pa := a.PodAntiAffinity; pa != nil {
				for _, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
					add(t.LabelSelector, append(t.MatchLabelKeys, t.MismatchLabelKeys...))
				}
				for _, t := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
					add(t.PodAffinityTerm.LabelSelector, nil)
				}
			}
		}
		for _, c := range p.Spec.TopologySpreadConstraints {
			add(c.LabelSelector, c.MatchLabelKeys)
		}
	}
	return keys
}

// rules: pod p's node requirements (with kube-scheduler's reasons) and
// preferred terms, against the pods the cluster holds.
func (c *Cluster) rules(p *corev1.Pod) ([]rule, []*wire.PreferredTermT) {
	var out []rule
	if ps := HostPorts(p); len(ps) > 0 {
		var names []string
		for i, n := range c.Nodes {
			if c.ports[i].conflicts(ps) {
				names = append(names, n.Name)
			}
		}
		if len(names) > 0 {
			out = append(out, rule{portsWhy, orderPorts, notIn(NodeLabel, names)})
		}
	}
	out = append(out, c.sideRules(sideRequests(Requests(p)))...)
	out = append(out, c.restrictionRules(p)...)
	out = append(out, c.attachRules(p)...)
	out = append(out, c.volumeRules(p)...)
	out = append(out, c.spreadRules(p)...)
	out = append(out, c.affinityRules(p)...)
	out = append(out, c.featureRules(p)...)
	return out, c.preferred(p)
}

// volumeRules: the nodes where pod p's volumes cannot be (Options.
// VolumeNodes), as kube-scheduler's VolumeBinding reads them, in its
// order: outside the node affinity of a PersistentVolume its claims are
// bound to; else outside a StorageClass's allowed topologies, not the
// node its claims are being provisioned for, or without a pre-made volume
// for each; else without the storage capacity a claim to provision needs;
// else, by VolumeZone, outside a bound volume's zone or region label.
// Each is read on a node's labels alone (volumeutil.CheckNodeAffinity,
// MatchTopologySelectorTerms: matchFields match no node). A local
// volume's few nodes are listed (In), a zone's many others excluded.
func (c *Cluster) volumeRules(p *corev1.Pod) []rule {
	if c.opt.VolumeNodes == nil {
		return nil
	}
	v := c.opt.VolumeNodes(p)
	if v == nil {
		return nil
	}
	holds := func(n *corev1.Node, sels []*corev1.NodeSelector) bool {
		labelsOnly := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: n.Labels}}
		for _, s := range sels {
			if m, err := schedcorev1.MatchNodeSelectorTerms(labelsOnly, s); err != nil || !m {
				return false
			}
		}
		return true
	}
	var onEach []map[int]bool // each pre-made claim's nodes: those of its volumes not taken
	for _, pm := range v.PreMade {
		on := map[int]bool{}
		for _, pv := range pm.Volumes {
			if !c.opt.VolumesTaken[pv.Name] && !c.volTaken[pv.Name] {
				for i := range c.pvNodes(pv) {
					on[i] = true
				}
			}
		}
		onEach = append(onEach, on)
	}
	premade := func(ni int) bool {
		for _, on := range onEach {
			if !on[ni] {
				return false
			}
		}
		return true
	}
	var fit []string
	miss := map[string][]string{}
	for ni, n := range c.Nodes {
		switch {
		case !holds(n, v.Bound):
			miss[volumeWhy] = append(miss[volumeWhy], n.Name)
		case (v.Node != "" && n.Name != v.Node) || !holds(n, v.Provision) || !premade(ni):
			miss[provisionWhy] = append(miss[provisionWhy], n.Name)
		case !holds(n, v.Capacity):
			miss[storageWhy] = append(miss[storageWhy], n.Name)
		case !holds(n, v.Zone):
			miss[zoneWhy] = append(miss[zoneWhy], n.Name)
		default:
			fit = append(fit, n.Name)
		}
	}
	var out []rule
	for _, why := range sortedKeys(miss) {
		req := c.exclude(miss[why])
		if len(fit) <= maxListed && len(miss) == 1 {
			req = in(NodeLabel, fit)
		}
		out = append(out, rule{why, orderVolumes, req})
	}
	return out
}

// volumeOn: the smallest of claim pm's volumes on node ni that neither
// this cycle's placements nor `also` took (nil: none). A volume's nodes
// are read once a round: a local volume's hostname at once, any other
// node affinity on each node's labels.
func (c *Cluster) volumeOn(pm PreMade, ni int, also map[string]bool) *corev1.PersistentVolume {
	for _, pv := range pm.Volumes {
		if c.opt.VolumesTaken[pv.Name] || c.volTaken[pv.Name] || also[pv.Name] {
			continue
		}
		if c.pvNodes(pv)[ni] {
			return pv
		}
	}
	return nil
}

// pvNodes: the nodes a pre-made volume's node affinity admits, read on
// their labels (volumeutil.CheckNodeAffinity), kept for the round.
func (c *Cluster) pvNodes(pv *corev1.PersistentVolume) map[int]bool {
	if on, ok := c.volNodes[pv.Name]; ok {
		return on
	}
	on := map[int]bool{}
	na := pv.Spec.NodeAffinity
	switch {
	case na == nil || na.Required == nil:
		for i := range c.Nodes {
			on[i] = true
		}
	case len(na.Required.NodeSelectorTerms) == 1 && len(na.Required.NodeSelectorTerms[0].MatchExpressions) == 1 &&
		len(na.Required.NodeSelectorTerms[0].MatchFields) == 0 &&
		na.Required.NodeSelectorTerms[0].MatchExpressions[0].Key == HostnameKey &&
		na.Required.NodeSelectorTerms[0].MatchExpressions[0].Operator == corev1.NodeSelectorOpIn:
		for _, h := range na.Required.NodeSelectorTerms[0].MatchExpressions[0].Values { // a local volume's
			for _, i := range c.byHostname()[h] {
				on[i] = true
			}
		}
	default:
		for i, n := range c.Nodes {
			if storagehelpers.CheckNodeAffinity(pv, n.Labels) == nil {
				on[i] = true
			}
		}
	}
	if c.volNodes == nil {
		c.volNodes = map[string]map[int]bool{}
	}
	c.volNodes[pv.Name] = on
	return on
}

// byHostname: the nodes by their hostname label's value.
func (c *Cluster) byHostname() map[string][]int {
	if c.hostnames == nil {
		c.hostnames = map[string][]int{}
		for i, n := range c.Nodes {
			if h, ok := n.Labels[HostnameKey]; ok {
				c.hostnames[h] = append(c.hostnames[h], i)
			}
		}
	}
	return c.hostnames
}

// sideRules: the nodes that lack a side resource of `side`, by reason
// (the same for every pod asking the same, so kept for the round).
func (c *Cluster) sideRules(side corev1.ResourceList) []rule {
	key := ""
	for _, k := range sortedNames(side) {
		q := side[corev1.ResourceName(k)]
		key += k + "=" + q.String() + ";"
	}
	if c.sideCache == nil {
		c.sideCache = map[string][]rule{}
	}
	if r, ok := c.sideCache[key]; ok {
		return r
	}
	byWhy := map[string][]string{}
	for i, n := range c.Nodes {
		if why := sideMiss(c.side[i], side); why != "" {
			byWhy[why] = append(byWhy[why], n.Name)
		}
	}
	var out []rule
	for _, why := range sortedKeys(byWhy) {
		out = append(out, rule{why, orderSide, notIn(NodeLabel, byWhy[why])})
	}
	c.sideCache[key] = out
	return out
}

// valuesOf: the values of label key on the nodes of the pods `match` admits.
func (c *Cluster) valuesOf(key string, match func(*corev1.Pod) bool) []string {
	seen := map[string]bool{}
	for i, n := range c.Nodes {
		v, ok := n.Labels[key]
		if !ok || seen[v] {
			continue
		}
		for _, q := range c.on[i] {
			if match(q) {
				seen[v] = true
				break
			}
		}
	}
	return sortedKeys(seen)
}

// affinityRules: InterPodAffinity's filter, in its order: p's affinity,
// p's anti-affinity, the anti-affinity of the pods on the nodes.
func (c *Cluster) affinityRules(p *corev1.Pod) []rule {
	var out, existing []rule
	// The anti-affinity of the pods on the nodes, against p.
	forbidden := map[string]map[string]bool{}
	for _, e := range c.anti {
		n := c.Nodes[c.index[e.Spec.NodeName]]
		for _, t := range podTerms(e, true, false) {
			v, ok := n.Labels[t.key]
			if ok && t.matches(p, c.opt.NamespaceLabels) {
				if forbidden[t.key] == nil {
					forbidden[t.key] = map[string]bool{}
				}
				forbidden[t.key][v] = true
			}
		}
	}
	for _, k := range sortedKeys(forbidden) {
		existing = append(existing, rule{existingAntiWhy, orderAffinity, notIn(k, sortedKeys(forbidden[k]))})
	}
	// p's affinity: each term's key, valued where a pod matching all of
	// p's terms runs; when no pod does and p matches its own terms, any
	// node with the keys (the first of a series).
	if terms := podTerms(p, false, false); len(terms) > 0 {
		all := func(q *corev1.Pod) bool {
			for i := range terms {
				if !terms[i].matches(q, c.opt.NamespaceLabels) {
					return false
				}
			}
			return true
		}
		any := false
		for i := range terms {
			vals := c.valuesOf(terms[i].key, all)
			any = any || len(vals) > 0
			out = append(out, rule{affinityWhy, orderAffinity, in(terms[i].key, vals)})
		}
		if !any {
			out = out[:len(out)-len(terms)]
			if all(p) {
				for _, t := range terms {
					out = append(out, rule{affinityWhy, orderAffinity, &wire.SelectorRequirementT{Key: t.key, Operator: wire.SelectorOperatorExists}})
				}
			} else {
				out = append(out, rule{affinityWhy, orderAffinity, in(NodeLabel, nil)})
			}
		}
	}
	// p's anti-affinity: not where a pod its term matches runs.
	for _, t := range podTerms(p, true, false) {
		if vals := c.valuesOf(t.key, func(q *corev1.Pod) bool { return t.matches(q, c.opt.NamespaceLabels) }); len(vals) > 0 {
			out = append(out, rule{antiWhy, orderAffinity, notIn(t.key, vals)})
		}
	}
	return append(out, existing...)
}

// spreadRules: PodTopologySpread's filter for p's DoNotSchedule constraints.
func (c *Cluster) spreadRules(p *corev1.Pod) []rule {
	cons := spreadConstraints(p, true)
	if len(cons) == 0 {
		return nil
	}
	var out []rule
	required := nodeaffinity.GetRequiredNodeAffinity(p)
	for _, sc := range cons {
		out = append(out, rule{spreadLabelWhy, orderSpread, &wire.SelectorRequirementT{Key: sc.TopologyKey, Operator: wire.SelectorOperatorExists}})
	}
	for _, sc := range cons {
		counts, low := c.spreadCounts(p, sc, cons, required)
		if low < 0 || (sc.MinDomains != nil && int32(len(counts)) < *sc.MinDomains) {
			low = 0
		}
		self := int32(0)
		if sc.sel.Matches(labels.Set(p.Labels)) {
			self = 1
		}
		// A value with no such pod (or on no counted node) passes: self - low <= 1 <= maxSkew.
		var fail []string
		for v, n := range counts {
			if n+self-low > sc.MaxSkew {
				fail = append(fail, v)
			}
		}
		if len(fail) > 0 {
			sort.Strings(fail)
			out = append(out, rule{spreadWhy, orderSpread, notIn(sc.TopologyKey, fail)})
		}
	}
	return out
}

// spreadCounts: per value of the constraint's key, the pods of p's
// namespace its selector matches (not terminating), on the nodes that
// count: those with every constraint's key, and that pass its node
// inclusion policies (node affinity honoured, taints ignored, by default);
// and the least of them (-1: no value).
func (c *Cluster) spreadCounts(p *corev1.Pod, sc spreadConstraint, all []spreadConstraint, required nodeaffinity.RequiredNodeAffinity) (map[string]int32, int32) {
	counts := map[string]int32{}
nodes:
	for i, n := range c.Nodes {
		for _, o := range all {
			if _, ok := n.Labels[o.TopologyKey]; !ok {
				continue nodes
			}
		}
		if sc.NodeAffinityPolicy == nil || *sc.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor {
			if ok, _ := required.Match(n); !ok {
				continue
			}
		}
		if sc.NodeTaintsPolicy != nil && *sc.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
			if _, bad := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, p.Spec.Tolerations, hardTaint, false); bad {
				continue
			}
		}
		v := n.Labels[sc.TopologyKey]
		k := counts[v]
		if !sc.sel.Empty() {
			for _, q := range c.on[i] {
				if q.DeletionTimestamp == nil && q.Namespace == p.Namespace && sc.sel.Matches(labels.Set(q.Labels)) {
					k++
				}
			}
		}
		counts[v] = k
	}
	low := int32(-1)
	for _, n := range counts {
		if low < 0 || n < low {
			low = n
		}
	}
	return counts, low
}

func hardTaint(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// preferred: p's preferred pod affinity (its key valued where a pod the
// term matches runs), preferred anti-affinity (not there), and
// ScheduleAnyway spread (the values with the fewest matching pods), as
// preferred node terms with their weights (ScheduleAnyway: 50).
func (c *Cluster) preferred(p *corev1.Pod) []*wire.PreferredTermT {
	var out []*wire.PreferredTermT
	add := func(w int32, e *wire.SelectorRequirementT) {
		if w < 1 || w > 100 {
			return
		}
		out = append(out, &wire.PreferredTermT{Weight: w, Preference: &wire.SelectorTermT{MatchExpressions: []*wire.SelectorRequirementT{e}}})
	}
	for _, anti := range []bool{false, true} {
		for _, t := range podTerms(p, anti, true) {
			vals := c.valuesOf(t.key, func(q *corev1.Pod) bool { return t.matches(q, c.opt.NamespaceLabels) })
			if len(vals) == 0 {
				continue
			}
			if anti {
				add(t.weight, notIn(t.key, vals))
			} else {
				add(t.weight, in(t.key, vals))
			}
		}
	}
	soft := spreadConstraints(p, false)
	required := nodeaffinity.GetRequiredNodeAffinity(p)
	for _, sc := range soft {
		counts, low := c.spreadCounts(p, sc, soft, required)
		var best []string
		for v, n := range counts {
			if n == low {
				best = append(best, v)
			}
		}
		if len(best) > 0 && len(best) < len(counts) {
			sort.Strings(best)
			add(50, in(sc.TopologyKey, best))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedNames(rl corev1.ResourceList) []string {
	out := make([]string, 0, len(rl))
	for k := range rl {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}
