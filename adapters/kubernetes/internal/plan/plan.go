package plan

// One cycle's plan: the pods of the cycle as units (Placer jobs), placed in
// Placer rounds ("waves"); what to bind, and why the rest wait.
//
// Units: a pod alone; the pods of one shape that must sit on distinct nodes
// (required anti-affinity on kubernetes.io/hostname among themselves, or a
// host port they share), one job with distinct_nodes, bound as far as they
// were placed; a pod group (gang) as its core, the minMember pods it still
// needs, one gang job per shape (members may differ, e.g. a launcher and
// its workers), all placed or none, and its extras, the members beyond
// minMember, placed after the core as far as they fit.
//
// Waves: units whose pod rules refer to one another (translate.Interact:
// pod affinity, anti-affinity on a wider key than the node, spread) are not
// placed in one round, whose requirements are computed at its start: each
// wave places, of such units, only those whose interacting units that come
// before them in the queue are done, and the next wave's requirements see
// its placements. A gang core's shapes go one wave each, the later ones
// near (or, with a required level, in) the topology domain of the first. What Placer
// does not count (pods per node, ephemeral storage, extended resources,
// host ports) is checked over a wave's placements in priority order; a pod
// that no longer fits goes again in the next wave. A gang core that fails
// is rolled back whole, with the placements that relied on it, and the
// units Placer left unplaced since its first placement get another try.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/placerclient"
	"placer.local/kubernetes/internal/translate"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// Group: a pod group as the planner reads it (the caller reads the
// PodGroup objects).
type Group struct {
	Gang    bool   // false: its pods are placed one by one (a native PodGroup's basic policy)
	Min     int    // members needed at once, bound ones included (0: every pod present)
	Name    string // for messages, e.g. "pod group ns/x"
	MinName string // "minMember" or "gang minCount"
	Wait    string // why its pods wait before any round ("" = none)
	Err     string // why it cannot be expressed ("" = it can)
	Within  string // a topology label: the group in one domain of its level, required ("": none)
}

// Input of one cycle.
type Input struct {
	Nodes   []*corev1.Node
	Bound   []*corev1.Pod // bound to a node and not finished (assumed ones included)
	Pending []*corev1.Pod // the cycle's pods, in queue order
	Group   func(key string, pods []*corev1.Pod) Group
	// Hold says why a pending pod waits out of the rounds ("" = it does
	// not), e.g. the pods evicted for it are still there.
	Hold   func(*corev1.Pod) string
	Opt    translate.Options
	Now    time.Time
	Rounds int // at most this many Placer rounds (waves)
	Solve  func(*wire.ScheduleRequestT) (*placerclient.Reply, error)
}

// Bind: a pod to bind, the GPU of a share (-1: none), and its claims'
// allocation (nil: no claims).
type Bind struct {
	Pod    *corev1.Pod
	Node   string
	GPU    int
	Claims *dra.PodAlloc
	// Volumes: the pre-made volumes its claims are given, claim to volume.
	Volumes map[string]string
	gpus    []uint8
}

// Assumed: the pod as it will be once bound (its node, a share's GPU index).
func (b Bind) Assumed() *corev1.Pod {
	cp := b.Pod.DeepCopy()
	cp.Spec.NodeName = b.Node
	if b.GPU >= 0 {
		if cp.Annotations == nil {
			cp.Annotations = map[string]string{}
		}
		cp.Annotations[translate.GPUIndexAnnot] = strconv.Itoa(b.GPU)
	}
	return cp
}

// Failure: a pod not placed this cycle, and why (the pod's condition).
type Failure struct {
	Pod    *corev1.Pod
	Reason string // Unschedulable, or SchedulerError for what cannot be expressed
	Why    string
	Group  string // its pod group ("" none)
	// ForNodes: room freed would not help it, only a change of the cluster
	// (Queue.Failed): Placer found it could never run on the cluster as it
	// is, even empty, and excluded no node for a reason a bound pod's end
	// may lift (ForNodes).
	ForNodes bool
}

// Preemption: a wave's preemptions (Options.Evict), for the caller to carry out.
type Preemption struct {
	Round *translate.Round
	Reply *wire.ScheduleReplyT
}

// Output of one cycle.
type Output struct {
	Binds       []Bind
	Failed      []Failure
	Untried     []*corev1.Pod // not tried this cycle (the round limit, or deferred behind a preemption)
	Preemptions []Preemption
	Rounds      int
	PlacerTime  time.Duration
	// Err: Placer did not answer, or refused a round ("" = it answered);
	// the pods not placed then have SchedulerError with it.
	Err string
	// Groups: per pod group tried this cycle, "" when its minimum is placed,
	// else why not.
	Groups map[string]string
	// GPUsLeftOut: nodes whose GPUs the rounds left out, more than Placer
	// takes on one node (translate.Cluster.GPUsLeftOut).
	GPUsLeftOut []string
}

const (
	todo = iota
	placed
	failed
	deferred // behind a preemption: untried this cycle
)

type unit struct {
	*translate.Unit
	idx     int
	gang    *gang
	core    bool
	after   *unit   // placed before this one is tried (a gang core's shapes in turn)
	edges   []*unit // pod rules between them
	state   int
	wave    int
	binds   []Bind
	retried bool
}

type gang struct {
	key    string
	g      Group
	core   []*unit
	extras []*unit
	domain translate.Domain // where its members placed are (nil: none yet, or only the cluster holds them)
	first  int              // the wave of its first placement this cycle (-1: none)
	why    string
}

type planner struct {
	in     Input
	out    *Output
	units  []*unit
	ganged map[string]*gang
	wave   int
	held   map[string]bool         // nodes with victims of a preemption this cycle
	nodes  map[string]*corev1.Node // by name (domainOf)
}

var refusedJob = regexp.MustCompile(`pending job (\d+) \(`)

// Run plans one cycle.
func Run(in Input) *Output {
	if in.Rounds < 1 {
		in.Rounds = 1
	}
	p := &planner{in: in, out: &Output{Groups: map[string]string{}}, ganged: map[string]*gang{}, held: map[string]bool{}}
	p.form()
	p.waves()
	return p.out
}

func (p *planner) fail(pod *corev1.Pod, reason, why string) {
	p.out.Failed = append(p.out.Failed, Failure{Pod: pod, Reason: reason, Why: why, Group: translate.GroupKey(pod)})
}

// ForNodes: whether Placer's record of an unplaced job says that only a
// change of the cluster can let it run: it could never run on the cluster
// as it is, even empty (a node's capacity, or a gang's size against its
// domains), and no node was excluded as taken this round or by a node
// rule (its pod rules, claims, host ports and pod counts are node rules
// here, and they change as bound pods end).
func ForNodes(up *wire.UnplacedT) bool {
	if up == nil || !up.Never {
		return false
	}
	for _, x := range up.Excluded {
		if x.Reason == wire.NodeExclusionAffinity || x.Reason == wire.NodeExclusionTaken {
			return false
		}
	}
	return true
}

// class: pods alike (translate.Signature), and how its pods interact.
type class struct {
	sig      string
	pods     []*corev1.Pod
	rules    bool
	distinct bool // its pods interact only as "not on one node"
	other    bool // they interact otherwise
}

// form makes the cycle's units, in queue order.
func (p *planner) form() {
	in := p.in
	keys := translate.RuleKeys(append(append([]*corev1.Pod(nil), in.Pending...), in.Bound...))
	classes := map[string]*class{}
	var order []*class
	classOf := map[types.UID]*class{}
	bad := map[types.UID]string{}
	for _, pod := range in.Pending {
		sig, why := translate.Signature(pod, keys)
		if why != "" {
			bad[pod.UID] = why
			continue
		}
		if in.Opt.DRA != nil && len(pod.Spec.ResourceClaims) > 0 {
			sig += "|claims:" + in.Opt.DRA.Signature(pod)
		}
		sig += in.Opt.NodeSignature(pod)
		c := classes[sig]
		if c == nil {
			c = &class{sig: sig, rules: translate.HasRules(pod)}
			classes[sig] = c
			order = append(order, c)
		}
		c.pods = append(c.pods, pod)
		classOf[pod.UID] = c
	}
	// Interactions between classes (alike pods interact alike).
	type pair struct{ a, b *class }
	inter := map[pair][2]bool{}
	for i, a := range order {
		for _, b := range order[i:] {
			if !a.rules && !b.rules {
				continue
			}
			qa, qb := a.pods[0], b.pods[0]
			if a == b {
				if len(a.pods) < 2 {
					continue
				}
				qb = a.pods[1]
			}
			d, o := translate.Interact(qa, qb, in.Opt.NamespaceLabels)
			if d || o {
				inter[pair{a, b}], inter[pair{b, a}] = [2]bool{d, o}, [2]bool{d, o}
				if a == b {
					a.distinct, a.other = d, o
				}
			}
		}
	}

	// Pod groups.
	boundOf := map[string][]*corev1.Pod{}
	for _, b := range in.Bound {
		if k := translate.GroupKey(b); k != "" {
			boundOf[k] = append(boundOf[k], b)
		}
	}
	members := map[string][]*corev1.Pod{}
	var groupOrder []string
	for _, pod := range in.Pending {
		if k := translate.GroupKey(pod); k != "" {
			if _, ok := members[k]; !ok {
				groupOrder = append(groupOrder, k)
			}
			members[k] = append(members[k], pod)
		}
	}
	groups := map[string]Group{}
	for _, k := range groupOrder {
		g := Group{Gang: true, Name: k, MinName: "minMember"}
		if in.Group != nil {
			g = in.Group(k, members[k])
		}
		groups[k] = g
	}
	classUnits := map[*class]*unit{}
	seenGroup := map[string]bool{}
	add := func(u *unit) *unit {
		u.idx = len(p.units)
		p.units = append(p.units, u)
		return u
	}
	for _, pod := range in.Pending {
		k := translate.GroupKey(pod)
		if k != "" && groups[k].Gang {
			if !seenGroup[k] {
				seenGroup[k] = true
				p.formGang(k, groups[k], members[k], boundOf[k], classOf, bad, add)
			}
			continue
		}
		if why := bad[pod.UID]; why != "" {
			p.fail(pod, "SchedulerError", "placer: cannot express: "+why)
			continue
		}
		if in.Hold != nil {
			if why := in.Hold(pod); why != "" {
				p.fail(pod, "Unschedulable", why)
				continue
			}
		}
		c := classOf[pod.UID]
		if c.distinct && !c.other {
			if u := classUnits[c]; u != nil {
				u.Pods = append(u.Pods, pod)
				continue
			}
			classUnits[c] = add(&unit{Unit: &translate.Unit{Key: "pods/" + pod.Namespace + "/" + pod.Name, Pods: []*corev1.Pod{pod}, DistinctNodes: true}})
			continue
		}
		add(&unit{Unit: &translate.Unit{Key: "pod/" + pod.Namespace + "/" + pod.Name, Pods: []*corev1.Pod{pod}}})
	}
	// Edges between units whose pods interact: through the classes that
	// interact (few: only pods with pod rules), not unit by unit.
	unitsOf := map[*class][]*unit{}
	for _, u := range p.units {
		seen := map[*class]bool{}
		for _, pod := range u.Pods {
			if c := classOf[pod.UID]; c != nil && !seen[c] {
				seen[c] = true
				unitsOf[c] = append(unitsOf[c], u)
			}
		}
	}
	linked := map[[2]*unit]bool{}
	for pr := range inter {
		for _, a := range unitsOf[pr.a] {
			for _, b := range unitsOf[pr.b] {
				if a == b || linked[[2]*unit{a, b}] {
					continue
				}
				linked[[2]*unit{a, b}], linked[[2]*unit{b, a}] = true, true
				a.edges = append(a.edges, b)
				b.edges = append(b.edges, a)
			}
		}
	}
}

// formGang: a pod group's units: its core (the members it needs at once
// beyond those bound: one gang unit per shape, in turn, largest first)
// and its extras (the members beyond: one unit per shape, placed as far as
// they fit once the core is).
func (p *planner) formGang(k string, g Group, pods, bound []*corev1.Pod, classOf map[types.UID]*class,
	bad map[types.UID]string, add func(*unit) *unit) {
	failAll := func(reason, why string) {
		for _, pod := range pods {
			p.fail(pod, reason, why)
		}
		p.out.Groups[k] = why
	}
	switch {
	case g.Err != "":
		failAll("SchedulerError", "placer: cannot express: "+g.Err)
		return
	case g.Wait != "":
		failAll("Unschedulable", "placer: "+g.Wait)
		return
	}
	for _, pod := range pods {
		if why := bad[pod.UID]; why != "" {
			failAll("SchedulerError", fmt.Sprintf("placer: cannot express pod %s/%s of %s: %s", pod.Namespace, pod.Name, g.Name, why))
			return
		}
		if p.in.Hold != nil {
			if why := p.in.Hold(pod); why != "" {
				failAll("Unschedulable", why)
				return
			}
		}
	}
	min := g.Min
	if min <= 0 {
		min = len(pods) + len(bound)
	}
	if len(pods)+len(bound) < min {
		failAll("Unschedulable", fmt.Sprintf("placer: waiting for %s: %d of its %s %d pods exist (%d bound, %d pending)",
			g.Name, len(pods)+len(bound), g.MinName, min, len(bound), len(pods)))
		return
	}
	gg := &gang{key: k, g: g, first: -1}
	p.ganged[k] = gg
	var on []string
	for _, b := range bound {
		on = append(on, b.Spec.NodeName)
	}
	gg.domain = p.domainOf(on)
	need := max(0, min-len(bound))
	core, extras := pods[:need], pods[need:]
	shapes := func(ps []*corev1.Pod) [][]*corev1.Pod {
		var out [][]*corev1.Pod
		idx := map[*class]int{}
		for _, pod := range ps {
			c := classOf[pod.UID]
			if c.other { // alike pods that constrain one another otherwise: one by one
				out = append(out, []*corev1.Pod{pod})
				continue
			}
			i, ok := idx[c]
			if !ok {
				i = len(out)
				idx[c] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], pod)
		}
		sort.SliceStable(out, func(i, j int) bool { return weight(out[i][0]) > weight(out[j][0]) })
		return out
	}
	var prev *unit
	for i, s := range shapes(core) {
		c := classOf[s[0].UID]
		u := add(&unit{Unit: &translate.Unit{Key: fmt.Sprintf("%s#core%d", k, i), Pods: s, Gang: true, Local: true,
			DistinctNodes: c.distinct && !c.other, Domain: gg.domain, Within: g.Within}, gang: gg, core: true, after: prev})
		gg.core = append(gg.core, u)
		prev = u
	}
	for i, s := range shapes(extras) {
		c := classOf[s[0].UID]
		u := add(&unit{Unit: &translate.Unit{Key: fmt.Sprintf("%s#extra%d", k, i), Pods: s,
			DistinctNodes: c.distinct && !c.other, Domain: gg.domain, Within: g.Within}, gang: gg, after: prev})
		gg.extras = append(gg.extras, u)
	}
}

// weight orders a gang's shapes: most GPUs, then CPU, first.
func weight(p *corev1.Pod) int64 {
	rl := translate.Requests(p)
	g := rl[translate.GPUResource]
	c := rl[corev1.ResourceCPU]
	return g.Value()<<40 + c.MilliValue()
}

// ready: whether u may go in this wave, given `chosen` so far.
func (p *planner) ready(u *unit, chosen map[*unit]bool) bool {
	if u.state != todo {
		return false
	}
	if u.after != nil && u.after.state != placed {
		return false
	}
	if u.gang != nil && u.gang.why != "" {
		return false
	}
	for _, v := range u.edges {
		if chosen[v] || (v.idx < u.idx && v.state == todo) {
			return false
		}
	}
	return true
}

func (p *planner) waves() {
	for p.wave = 0; p.wave < p.in.Rounds; p.wave++ {
		chosen := map[*unit]bool{}
		var sel []*unit
		for _, u := range p.units {
			if p.ready(u, chosen) {
				chosen[u] = true
				sel = append(sel, u)
			}
		}
		// A unit that waits for a later round keeps the lower priorities
		// out of this one: they would take room it may need.
		block, waits := int32(0), false
		for _, u := range p.units {
			if u.state == todo && !chosen[u] && (!waits || translate.Priority(u.Pods[0]) > block) {
				block, waits = translate.Priority(u.Pods[0]), true
			}
		}
		if waits {
			kept := sel[:0]
			for _, u := range sel {
				if translate.Priority(u.Pods[0]) >= block {
					kept = append(kept, u)
				}
			}
			sel = kept
		}
		if len(sel) == 0 {
			break
		}
		if !p.round(sel) {
			break
		}
	}
	for _, u := range p.units {
		switch {
		case u.state == todo && u.gang != nil && u.gang.why != "":
			p.failUnit(u, u.gang.why)
		case u.state == todo || u.state == deferred:
			p.out.Untried = append(p.out.Untried, u.Pods...)
		case u.state == placed:
			p.out.Binds = append(p.out.Binds, u.binds...)
		}
	}
	for k, g := range p.ganged {
		if _, ok := p.out.Groups[k]; ok {
			continue
		}
		if g.why != "" {
			p.out.Groups[k] = g.why
		} else if p.coreDone(g) {
			p.out.Groups[k] = ""
		}
	}
}

func (p *planner) failUnit(u *unit, why string) {
	u.state = failed
	u.wave = p.wave
	for _, pod := range u.Pods {
		p.fail(pod, "Unschedulable", why)
	}
}

// accepted: the pods bound before this wave and those placed this cycle.
func (p *planner) accepted() []*corev1.Pod {
	out := append([]*corev1.Pod(nil), p.in.Bound...)
	for _, u := range p.units {
		if u.state != placed {
			continue
		}
		for _, b := range u.binds {
			out = append(out, b.Assumed())
		}
	}
	return out
}

// taken: what the pods placed this cycle took: their claims, and the
// pre-made volumes their volume claims were given.
func (p *planner) taken() (claims []*dra.PodAlloc, volumes map[string]bool) {
	volumes = map[string]bool{}
	for _, u := range p.units {
		if u.state != placed {
			continue
		}
		for _, b := range u.binds {
			if b.Claims != nil {
				claims = append(claims, b.Claims)
			}
			for _, pv := range b.Volumes {
				volumes[pv] = true
			}
		}
	}
	return claims, volumes
}

// round: one wave. False: Placer did not answer; the cycle ends.
func (p *planner) round(sel []*unit) bool {
	opt := p.in.Opt
	claimed, volumes := p.taken()
	if opt.DRA != nil {
		opt.Claimed = claimed
	}
	opt.VolumesTaken = volumes
	c := translate.NewCluster(p.in.Nodes, p.accepted(), opt)
	if p.out.GPUsLeftOut == nil {
		p.out.GPUsLeftOut = c.GPUsLeftOut // the same nodes each round of a cycle
	}
	byUnit := map[*translate.Unit]*unit{}
	var units []*translate.Unit
	for _, u := range sel {
		if g := u.gang; g != nil && g.domain == nil && u.after != nil {
			// the later shapes of a core, and the extras: near its first placed shape
			var on []string
			for _, b := range u.after.binds {
				on = append(on, b.Node)
			}
			g.domain = p.domainOf(on)
		}
		if u.gang != nil {
			u.Domain = u.gang.domain
		}
		byUnit[u.Unit] = u
		units = append(units, u.Unit)
	}
	r := translate.Build(c, units, p.in.Now.Unix())
	for _, s := range r.Skipped {
		u := byUnit[s.Unit]
		why := s.Why
		if s.Reason == "SchedulerError" {
			why = "placer: " + strings.TrimPrefix(why, "placer: ")
		}
		p.unitFailed(u, s.Reason, why)
	}
	if len(r.Request.Pending) == 0 {
		return true
	}
	p.out.Rounds++
	t0 := time.Now()
	reply, err := p.in.Solve(r.Request)
	// A round Placer refuses for one job's sake ("pending job N (...): ...")
	// goes again without that job, which is reported on its pods: one pod
	// never holds up the round. At most a few times.
	for tries := 0; err == nil && reply.Code == wire.ErrorCodeInvalidArgument && tries < 5; tries++ {
		m := refusedJob.FindStringSubmatch(reply.Message)
		if m == nil {
			break
		}
		j, _ := strconv.Atoi(m[1])
		if j >= len(r.Units) {
			break
		}
		u := byUnit[r.Units[j]]
		r.Drop(j, reply.Message)
		p.unitFailed(u, "SchedulerError", "placer: the Placer service refused this pod: "+reply.Message)
		if len(r.Request.Pending) == 0 {
			p.out.PlacerTime += time.Since(t0)
			return true
		}
		reply, err = p.in.Solve(r.Request)
	}
	// A round of more constraint sets x node groups than Placer evaluates in
	// one ("... distinct constraint sets x ... node groups ..., above the
	// limit": pods pinned to many different nodes) goes again with its
	// first half, the rest left todo for the next wave (or cycle), the cut
	// never between two units of one gang (a gang's later shapes may still
	// come in later waves, as they do): halves until it fits or one unit is
	// left.
	for err == nil && reply.Code == wire.ErrorCodeResourceExhausted && strings.Contains(reply.Message, "distinct constraint sets") {
		keep := len(r.Units) / 2
		for keep > 0 && byUnit[r.Units[keep-1]].gang != nil && byUnit[r.Units[keep-1]].gang == byUnit[r.Units[keep]].gang {
			keep--
		}
		if keep == 0 {
			break
		}
		for j := len(r.Units) - 1; j >= keep; j-- {
			r.Drop(j, "")
		}
		reply, err = p.in.Solve(r.Request)
	}
	p.out.PlacerTime += time.Since(t0)
	if err != nil || reply.Code != wire.ErrorCodeOk {
		if err != nil {
			p.out.Err = fmt.Sprintf("placer: the Placer service did not answer (%v)", err)
		} else {
			p.out.Err = fmt.Sprintf("placer: the Placer service refused the round (%s: %s)", wire.EnumNamesErrorCode[reply.Code], reply.Message)
		}
		for _, u := range p.units { // what is not placed is told why; incomplete cores roll back
			if u.gang != nil && u.gang.why == "" && u.state == placed && !p.coreDone(u.gang) {
				p.rollback(u.gang)
			}
		}
		for _, u := range p.units {
			if u.state == todo {
				u.state = failed
				for _, pod := range u.Pods {
					p.fail(pod, "SchedulerError", p.out.Err)
				}
			}
		}
		return false
	}
	p.apply(r, reply.Result, byUnit)
	return true
}

// domainOf: the deepest topology domain holding the nodes named (nil:
// none but the cluster, or no node).
func (p *planner) domainOf(names []string) translate.Domain {
	labels := p.in.Opt.TopologyLabels
	if len(labels) == 0 || len(names) == 0 {
		return nil
	}
	if p.nodes == nil {
		p.nodes = make(map[string]*corev1.Node, len(p.in.Nodes))
		for _, n := range p.in.Nodes {
			p.nodes[n.Name] = n
		}
	}
	var ds []translate.Domain
	for _, name := range names {
		n := p.nodes[name]
		if n == nil {
			return nil
		}
		ds = append(ds, translate.DomainOf(n, labels))
	}
	return translate.Common(ds)
}

func (p *planner) coreDone(g *gang) bool {
	for _, u := range g.core {
		if u.state != placed {
			return false
		}
	}
	return true
}

// unitFailed: u's pods are not placed this cycle; a gang's failure is its
// whole group's.
func (p *planner) unitFailed(u *unit, reason, why string) {
	if g := u.gang; g != nil && u.core {
		p.rollback(g)
		p.gangFailed(g, reason, why)
		return
	}
	u.state, u.wave = failed, p.wave
	for _, pod := range u.Pods {
		p.fail(pod, reason, why)
	}
}

// gangFailed: every pending member of g not bound this cycle is told why.
func (p *planner) gangFailed(g *gang, reason, why string) {
	if g.why != "" {
		return
	}
	g.why = why
	for _, u := range append(append([]*unit(nil), g.core...), g.extras...) {
		if u.state == placed && !u.core {
			continue // extras placed stay (the core was complete then)
		}
		u.state, u.wave = failed, p.wave
		for _, pod := range u.Pods {
			p.fail(pod, reason, why)
		}
	}
}

// rollback: g's core placements this cycle are undone, with the units
// placed since that interact with them (their requirements saw them), and
// the units Placer left unplaced since get one more try.
func (p *planner) rollback(g *gang) {
	if g.first < 0 {
		return
	}
	undone := map[*unit]bool{}
	for _, u := range g.core {
		if u.state == placed {
			u.state, u.binds = todo, nil
			undone[u] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, u := range p.units {
			if u.state != placed || u.wave < g.first || undone[u] || u.gang == g {
				continue
			}
			for _, v := range u.edges {
				if undone[v] {
					u.state, u.binds = todo, nil
					undone[u] = true
					changed = true
					break
				}
			}
		}
	}
	for _, u := range p.units {
		if u.state == failed && u.wave >= g.first && u.gang != g && !u.retried && (u.gang == nil || u.gang.why == "") {
			u.retried = true
			u.state = todo
			p.unfail(u)
		}
	}
	g.first = -1
}

// unfail takes u's pods out of the failures (they go again).
func (p *planner) unfail(u *unit) {
	drop := map[types.UID]bool{}
	for _, pod := range u.Pods {
		drop[pod.UID] = true
	}
	kept := p.out.Failed[:0]
	for _, f := range p.out.Failed {
		if !drop[f.Pod.UID] {
			kept = append(kept, f)
		}
	}
	p.out.Failed = kept
}

// apply: a wave's reply. Placements (each unit's pods in order, a partial
// placement its first pods) are checked, in priority order, for what
// Placer does not count; the units and gangs follow.
func (p *planner) apply(r *translate.Round, res *wire.ScheduleReplyT, byUnit map[*translate.Unit]*unit) {
	// Preemptions (Options.Evict): no placement on a node with a victim,
	// nor of a unit a preemption is for, is taken this cycle.
	preemptors := map[int]bool{}
	if len(res.Preemptions) > 0 {
		p.out.Preemptions = append(p.out.Preemptions, Preemption{Round: r, Reply: res})
		for j, vs := range r.Victims(res.Preemptions) {
			if j >= 0 {
				preemptors[j] = true
			}
			for _, v := range vs {
				p.held[v.Spec.NodeName] = true
			}
		}
	}
	type plc struct {
		j    int
		u    *unit
		pods []Bind
	}
	var pls []plc
	placedJob := map[int]bool{}
	for _, pl := range res.Placements {
		j := int(pl.Job)
		if j >= len(r.Units) || len(pl.Replicas) > len(r.Units[j].Pods) {
			continue
		}
		placedJob[j] = true
		u := byUnit[r.Units[j]]
		x := plc{j: j, u: u}
		for i, rp := range pl.Replicas {
			if int(rp.Node) >= len(r.C.Nodes) {
				continue
			}
			b := Bind{Pod: u.Pods[i], Node: r.C.Nodes[rp.Node].Name, GPU: -1, gpus: rp.Gpus}
			if m, _ := translate.Share(u.Pods[i]); m > 0 && len(rp.Gpus) == 1 {
				b.GPU = int(rp.Gpus[0])
			}
			x.pods = append(x.pods, b)
		}
		pls = append(pls, x)
	}
	sort.SliceStable(pls, func(a, b int) bool {
		ja, jb := r.Request.Pending[pls[a].j], r.Request.Pending[pls[b].j]
		if ja.Priority != jb.Priority {
			return ja.Priority > jb.Priority
		}
		if ja.SubmitTime != jb.SubmitTime {
			return ja.SubmitTime < jb.SubmitTime
		}
		return pls[a].u.idx < pls[b].u.idx
	})
	unplaced := map[int]*wire.UnplacedT{}
	for _, up := range res.Unplaced {
		if int(up.Job) < len(r.Units) {
			unplaced[int(up.Job)] = up
		}
	}
	r.Placed(res)
	why := func(j int) string {
		if up := unplaced[j]; up != nil {
			return r.Explain(j, up)
		}
		return "placer: not placed by the Placer service this round"
	}
	for _, x := range pls {
		u := x.u
		onHeld := preemptors[x.j]
		for _, b := range x.pods {
			onHeld = onHeld || p.held[b.Node]
		}
		if onHeld { // placed again next cycle, once the victims are gone
			p.deferUnit(u)
			continue
		}
		var ok []Bind
		var again []*corev1.Pod
		for _, b := range x.pods {
			ni, _ := r.C.Index(b.Node)
			if miss := r.C.Take(b.Pod, ni, b.gpus); miss != "" {
				again = append(again, b.Pod)
				if u.Avoid == nil {
					u.Avoid = map[string]string{}
				}
				u.Avoid[b.Node] = miss
				continue
			}
			b.Claims, b.Volumes = r.C.Claimed(b.Pod), r.C.TookVolumes(b.Pod)
			ok = append(ok, b)
		}
		if u.gang != nil && u.core {
			if len(again) > 0 || len(ok) < len(u.Pods) {
				p.rollback(u.gang)
				continue // the whole gang goes again in a later wave, off the nodes that could not take it
			}
		}
		u.state, u.wave, u.binds = placed, p.wave, ok
		if u.gang != nil && u.gang.first < 0 {
			u.gang.first = p.wave
		}
		if len(again) > 0 { // a unit of its own, the next wave
			rest := &unit{Unit: &translate.Unit{Key: u.Key + "+", Pods: again, DistinctNodes: u.DistinctNodes, Domain: u.Domain,
				Within: u.Within}, idx: u.idx, gang: u.gang, edges: u.edges}
			p.units = append(p.units, rest)
			for _, v := range u.edges {
				v.edges = append(v.edges, rest)
			}
		}
		// A partial placement: the rest of the unit's pods wait, told why.
		if n := len(x.pods) + len(again); n < len(u.Pods) && !(u.gang != nil && u.core) {
			msg := why(x.j)
			for _, pod := range u.Pods[n:] {
				p.fail(pod, "Unschedulable", msg)
			}
		}
	}
	for j, u := range r.Units {
		if placedJob[j] {
			continue
		}
		pu := byUnit[u]
		if pu.state != todo {
			continue
		}
		msg, n := why(j), len(p.out.Failed)
		switch {
		case pu.gang != nil && pu.core:
			p.unitFailed(pu, "Unschedulable", gangWhy(pu, msg))
		case pu.gang != nil:
			pu.state, pu.wave = failed, p.wave // extras that do not fit: the core stands
			for _, pod := range pu.Pods {
				p.fail(pod, "Unschedulable", msg)
			}
		default:
			p.unitFailed(pu, "Unschedulable", msg)
		}
		if ForNodes(unplaced[j]) { // the failures just told
			for k := n; k < len(p.out.Failed); k++ {
				p.out.Failed[k].ForNodes = true
			}
		}
	}
}

// deferUnit: u (a gang: all of it) waits untried for the next cycle.
func (p *planner) deferUnit(u *unit) {
	us := []*unit{u}
	if g := u.gang; g != nil && u.core {
		p.rollback(g)
		us = append(append([]*unit(nil), g.core...), g.extras...)
	}
	for _, v := range us {
		if v.state == todo || (v.state == placed && v.gang != nil) {
			v.state, v.binds = deferred, nil
		}
	}
}

// gangWhy: a gang core's failure as its pods' message.
func gangWhy(u *unit, msg string) string {
	g := u.gang
	n := 0
	for _, c := range g.core {
		n += len(c.Pods)
	}
	if len(g.core) == 1 {
		return msg
	}
	return fmt.Sprintf("placer: %s: the %d pods it needs at once cannot all be placed; %d like %s/%s: %s",
		g.g.Name, n, len(u.Pods), u.Pods[0].Namespace, u.Pods[0].Name, msg)
}
