package plan

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"

	"placer.local/kubernetes/internal/placerclient"
	"placer.local/kubernetes/internal/placertest"
	"placer.local/kubernetes/internal/translate"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// solver: `placer serve` ($PLACER_BIN, as ctest sets it) and a client.
func solver(t *testing.T) func(*wire.ScheduleRequestT) (*placerclient.Reply, error) {
	t.Helper()
	ep, _ := placertest.Serve(t)
	c, err := placerclient.New(placerclient.Options{Endpoint: ep, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.Solve
}

// nodes: n nodes of 8 GPUs, 32 CPUs, named n01.., in zones of `perZone`.
func nodes(n, perZone int) []*corev1.Node {
	var out []*corev1.Node
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%02d", i)
		out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			translate.HostnameKey: name, "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", (i-1)/perZone+1),
			"placer.io/rack": fmt.Sprintf("rack-%d", (i-1)/perZone+1), translate.GPUProduct: "H100"}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"),
				corev1.ResourceMemory: resource.MustParse("256Gi"), translate.GPUResource: resource.MustParse("8"),
				corev1.ResourcePods: resource.MustParse("110")},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	return out
}

var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pod(name string, gpus int64, cpu string, labels map[string]string) *corev1.Pod {
	l := map[string]string{}
	for k, v := range labels {
		l[k] = v
	}
	created = created.Add(time.Second)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: l,
		CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{SchedulerName: "placer", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi"),
				translate.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}
}

func anti(p *corev1.Pod, key string, match map[string]string) *corev1.Pod {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: match}}}}
	return p
}

func run(t *testing.T, solve func(*wire.ScheduleRequestT) (*placerclient.Reply, error), ns []*corev1.Node, bound, pending []*corev1.Pod,
	groups map[string]Group) *Output {
	t.Helper()
	return runOpt(t, solve, translate.Options{TopologyLabels: []string{"placer.io/rack"}}, ns, bound, pending, groups)
}

func runOpt(t *testing.T, solve func(*wire.ScheduleRequestT) (*placerclient.Reply, error), opt translate.Options, ns []*corev1.Node,
	bound, pending []*corev1.Pod, groups map[string]Group) *Output {
	t.Helper()
	in := Input{Nodes: ns, Bound: bound, Pending: pending, Opt: opt, Now: time.Unix(2e9, 0), Rounds: 16, Solve: solve}
	if groups != nil {
		in.Group = func(k string, _ []*corev1.Pod) Group { return groups[k] }
	}
	out := Run(in)
	if out.Err != "" {
		t.Fatalf("placer: %s", out.Err)
	}
	return out
}

func boundTo(out *Output) map[string]string {
	m := map[string]string{}
	for _, b := range out.Binds {
		m[b.Pod.Name] = b.Node
	}
	return m
}

func failedWhy(out *Output) map[string]string {
	m := map[string]string{}
	for _, f := range out.Failed {
		m[f.Pod.Name] = f.Why
	}
	return m
}

// Five pods of one shape with required anti-affinity on the hostname
// among themselves, three nodes: one job on distinct nodes, three bound
// (a partial placement is bound), the other two told why in
// kube-scheduler's words.
func TestPartialPlacementIsBound(t *testing.T) {
	solve := solver(t)
	var pending []*corev1.Pod
	for i := 0; i < 5; i++ {
		pending = append(pending, anti(pod(fmt.Sprintf("web-%d", i), 1, "1", map[string]string{"app": "web"}), translate.HostnameKey, map[string]string{"app": "web"}))
	}
	out := run(t, solve, nodes(3, 3), nil, pending, nil)
	b := boundTo(out)
	seen := map[string]bool{}
	for _, n := range b {
		seen[n] = true
	}
	if len(b) != 3 || len(seen) != 3 || out.Rounds != 1 {
		t.Fatalf("bound %v in %d rounds, want 3 pods on 3 nodes in 1 round", b, out.Rounds)
	}
	for _, p := range []string{"web-3", "web-4"} {
		if why := failedWhy(out)[p]; !strings.Contains(why, "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.") {
			t.Errorf("%s: %q", p, why)
		}
	}
}

// A gang of 8 pods of 8 GPUs with minMember 4, room for 6: 6 bound (at
// least minMember, and more as they fit), in its rack first.
func TestGangMinMemberBindsWhatFits(t *testing.T) {
	solve := solver(t)
	var pending []*corev1.Pod
	for i := 0; i < 8; i++ {
		pending = append(pending, pod(fmt.Sprintf("w-%d", i), 8, "4", map[string]string{translate.PodGroupLabel: "train"}))
	}
	groups := map[string]Group{"podgroup/ns/train": {Gang: true, Min: 4, Name: "pod group train", MinName: "minMember"}}
	out := run(t, solve, nodes(6, 3), nil, pending, groups)
	if len(out.Binds) != 6 {
		t.Fatalf("bound %v, want 6", boundTo(out))
	}
	if why, ok := out.Groups["podgroup/ns/train"]; !ok || why != "" {
		t.Errorf("the group's outcome: %q, %v", why, ok)
	}
	// The nodes its own extras took are told as what they lack once bound.
	for name, why := range failedWhy(out) {
		if why != "0/6 nodes are available: 6 Insufficient nvidia.com/gpu." {
			t.Errorf("%s: %q", name, why)
		}
	}
	// minMember 7 of 8 with room for 6: none.
	groups["podgroup/ns/train"] = Group{Gang: true, Min: 7, Name: "pod group train", MinName: "minMember"}
	out = run(t, solve, nodes(6, 3), nil, pending, groups)
	if len(out.Binds) != 0 || len(out.Failed) != 8 || out.Groups["podgroup/ns/train"] == "" {
		t.Fatalf("min 7 with room for 6: bound %v, %d failed, group %q", boundTo(out), len(out.Failed), out.Groups["podgroup/ns/train"])
	}
	// Too few members: they wait, saying so.
	out = run(t, solve, nodes(6, 3), nil, pending[:5], groups)
	if why := failedWhy(out)["w-0"]; !strings.Contains(why, "waiting for pod group train: 5 of its minMember 7 pods exist (0 bound, 5 pending)") || out.Rounds != 0 {
		t.Errorf("waiting: %q (%d rounds)", why, out.Rounds)
	}
}

// A launcher and its workers, of different sizes, are one gang: bound
// together when all fit, none when the workers do not.
func TestHeterogeneousGang(t *testing.T) {
	solve := solver(t)
	g := map[string]string{translate.PodGroupLabel: "mpi"}
	pending := []*corev1.Pod{pod("launcher", 0, "2", g)}
	for i := 0; i < 4; i++ {
		pending = append(pending, pod(fmt.Sprintf("worker-%d", i), 8, "16", g))
	}
	groups := map[string]Group{"podgroup/ns/mpi": {Gang: true, Name: "pod group mpi", MinName: "minMember"}}
	out := run(t, solve, nodes(6, 6), nil, pending, groups)
	if len(out.Binds) != 5 || out.Rounds != 2 {
		t.Fatalf("bound %v in %d rounds, want all 5 in 2", boundTo(out), out.Rounds)
	}
	// Three nodes: the workers do not fit, and the launcher is not bound alone.
	out = run(t, solve, nodes(3, 3), nil, pending, groups)
	if len(out.Binds) != 0 || len(out.Failed) != 5 {
		t.Fatalf("bound %v, %d failed", boundTo(out), len(out.Failed))
	}
	if why := failedWhy(out)["launcher"]; !strings.Contains(why, "pod group mpi: the 5 pods it needs at once cannot all be placed; 4 like ns/worker-0:") ||
		!strings.Contains(why, "Resources were found for 3 replica(s) while 4 are required") {
		t.Errorf("launcher: %q", why)
	}
	// The launcher fits nowhere (it is the later shape): the workers placed first are rolled back.
	pending[0].Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("64")
	out = run(t, solve, nodes(6, 6), nil, pending, groups)
	if len(out.Binds) != 0 || len(out.Failed) != 5 {
		t.Fatalf("an unfit launcher: bound %v, %d failed", boundTo(out), len(out.Failed))
	}
}

// Anti-affinity on the zone among three pods, two zones: two rounds
// place one each in distinct zones, the third is told why.
func TestZoneAntiAffinityInSuccessiveRounds(t *testing.T) {
	solve := solver(t)
	var pending []*corev1.Pod
	for i := 0; i < 3; i++ {
		pending = append(pending, anti(pod(fmt.Sprintf("db-%d", i), 1, "1", map[string]string{"app": "db"}), "topology.kubernetes.io/zone", map[string]string{"app": "db"}))
	}
	ns := nodes(4, 2)
	out := run(t, solve, ns, nil, pending, nil)
	b := boundTo(out)
	zones := map[string]bool{}
	for _, n := range b {
		for _, x := range ns {
			if x.Name == n {
				zones[x.Labels["topology.kubernetes.io/zone"]] = true
			}
		}
	}
	if len(b) != 2 || len(zones) != 2 {
		t.Fatalf("bound %v (zones %v), want 2 pods in 2 zones", b, zones)
	}
	if why := failedWhy(out)["db-2"]; why != "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules." {
		t.Errorf("db-2: %q (%d rounds)", why, out.Rounds)
	}
}

// Spread on the zone with maxSkew 1: four pods, two zones of unequal
// room, two in each.
func TestSpreadInSuccessiveRounds(t *testing.T) {
	solve := solver(t)
	var pending []*corev1.Pod
	for i := 0; i < 4; i++ {
		p := pod(fmt.Sprintf("s-%d", i), 1, "1", map[string]string{"app": "s"})
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "s"}}}}
		pending = append(pending, p)
	}
	ns := nodes(4, 3) // zone-1: 3 nodes, zone-2: 1
	out := run(t, solve, ns, nil, pending, nil)
	per := map[string]int{}
	for _, n := range boundTo(out) {
		for _, x := range ns {
			if x.Name == n {
				per[x.Labels["topology.kubernetes.io/zone"]]++
			}
		}
	}
	if len(out.Binds) != 4 || per["zone-1"] != 2 || per["zone-2"] != 2 {
		t.Fatalf("bound %v (per zone %v)", boundTo(out), per)
	}
}

// Affinity to a pod of the same cycle: the web pod goes where the cache
// pod was placed, in the next round.
func TestAffinityToAPodOfTheSameCycle(t *testing.T) {
	solve := solver(t)
	cache := pod("cache", 0, "30", map[string]string{"app": "cache"})
	web := pod("web", 0, "1", map[string]string{"app": "web"})
	web.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		{TopologyKey: translate.HostnameKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}}}}}
	out := run(t, solve, nodes(4, 4), nil, []*corev1.Pod{cache, web}, nil)
	b := boundTo(out)
	if len(b) != 2 || b["web"] != b["cache"] || out.Rounds != 2 {
		t.Fatalf("bound %v in %d rounds, want web beside cache", b, out.Rounds)
	}
}

// What Placer does not count is checked over a round: a node that holds
// three more pods gets three; the others go again, and are told why.
func TestPodCountCheckedOverTheRound(t *testing.T) {
	solve := solver(t)
	ns := nodes(1, 1)
	ns[0].Status.Allocatable[corev1.ResourcePods] = resource.MustParse("4")
	occupant := pod("occupant", 0, "1", nil)
	occupant.Spec.NodeName = "n01"
	var pending []*corev1.Pod
	for i := 0; i < 5; i++ {
		pending = append(pending, pod(fmt.Sprintf("p-%d", i), 0, "1", nil))
	}
	out := run(t, solve, ns, []*corev1.Pod{occupant}, pending, nil)
	if len(out.Binds) != 3 {
		t.Fatalf("bound %v, want 3", boundTo(out))
	}
	for name, why := range failedWhy(out) {
		if why != "0/1 nodes are available: 1 Too many pods." {
			t.Errorf("%s: %q", name, why)
		}
	}
	if len(out.Failed) != 2 {
		t.Errorf("%d failed, want 2", len(out.Failed))
	}
}

// A pod that cannot be expressed, or held, is reported alone.
func TestHeldAndInexpressiblePodsAlone(t *testing.T) {
	solve := solver(t)
	bad := pod("bad", 0, "1", nil)
	bad.Annotations = map[string]string{translate.GPUMilliAnnot: "5000"}
	held := pod("held", 0, "1", nil)
	in := Input{Nodes: nodes(2, 2), Pending: []*corev1.Pod{bad, held, pod("ok", 1, "1", nil)}, Now: time.Unix(2e9, 0), Rounds: 4, Solve: solve,
		Hold: func(p *corev1.Pod) string {
			if p.Name == "held" {
				return "placer: held"
			}
			return ""
		}}
	out := Run(in)
	f := failedWhy(out)
	if len(out.Binds) != 1 || !strings.Contains(f["bad"], "placer: cannot express: annotation placer.io/gpu-milli") || f["held"] != "placer: held" {
		t.Errorf("bound %v, failed %v", boundTo(out), f)
	}
}

func TestBackoffDoublesToTenSeconds(t *testing.T) {
	q := NewQueue()
	now := time.Unix(1000, 0)
	p := pod("p", 0, "1", nil)
	var got []time.Duration
	for i := 0; i < 6; i++ {
		q.Failed(p.UID, now, false)
		_, _, waiting, next := q.Ready([]*corev1.Pod{p}, now)
		if waiting != 1 {
			t.Fatalf("not backing off after a failure")
		}
		got = append(got, next.Sub(now))
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("back-offs %v, want %v s", got, want)
		}
	}
	if ready, _, _, _ := q.Ready([]*corev1.Pod{p}, now.Add(10*time.Second)); len(ready) != 1 {
		t.Errorf("not ready after its back-off")
	}
	q.Forget(p.UID)
	if q.Attempts(p.UID) != 0 {
		t.Errorf("forgotten")
	}
}

// failedTwo: a queue whose cycle looked at t0, and pods p and o that
// failed in it (o for nodes alone where oForNodes).
func failedTwo(oForNodes bool) (q *Queue, t0 time.Time, p, o *corev1.Pod) {
	q, t0 = NewQueue(), time.Unix(1000, 0)
	p, o = pod("p", 0, "1", nil), pod("o", 0, "1", nil)
	q.Ready([]*corev1.Pod{p, o}, t0)
	q.Failed(p.UID, t0.Add(50*time.Millisecond), false)
	q.Failed(o.UID, t0.Add(50*time.Millisecond), oForNodes)
	return q, t0, p, o
}

// A requeue after a pod's failed attempt looked (a bound pod finished, a
// node came) makes it ready at once, its attempts still counted; one
// before that attempt's cycle began does not, nor does the next failure
// undo the back-off that follows it.
func TestRequeueAfterAnAttemptEndsItsBackoff(t *testing.T) {
	q, t0, p, o := failedTwo(false)
	pods := []*corev1.Pod{p, o}
	q.Requeue(t0.Add(-time.Second))
	if ready, _, waiting, _ := q.Ready(pods, t0.Add(100*time.Millisecond)); len(ready) != 0 || waiting != 2 {
		t.Fatalf("requeued before the attempt looked: %d ready, %d backing off, want 0 and 2", len(ready), waiting)
	}
	// A pod finished between the first cycle's look (t0) and the failures
	// it recorded: both back-offs end.
	q.Requeue(t0.Add(20 * time.Millisecond))
	ready, _, waiting, _ := q.Ready(pods, t0.Add(200*time.Millisecond))
	if len(ready) != 2 || waiting != 0 {
		t.Fatalf("requeued after the attempt looked: %d ready, %d backing off, want 2 and 0", len(ready), waiting)
	}
	q.Failed(p.UID, t0.Add(250*time.Millisecond), false)
	if q.Attempts(p.UID) != 2 {
		t.Errorf("attempts %d, want 2", q.Attempts(p.UID))
	}
	if ready, _, _, next := q.Ready([]*corev1.Pod{p}, t0.Add(300*time.Millisecond)); len(ready) != 0 || next != t0.Add(2250*time.Millisecond) {
		t.Errorf("after its second failure: %d ready, next %v, want 0 and a 2 s back-off", len(ready), next.Sub(t0))
	}
	q.Requeue(t0.Add(400 * time.Millisecond))
	if ready, _, _, _ := q.Ready([]*corev1.Pod{p}, t0.Add(500*time.Millisecond)); len(ready) != 1 {
		t.Errorf("requeued after its second attempt: not ready")
	}
}

// A pod's end (RoomFreed) makes ready the pods whose attempt found room
// might help them, not those that could not run even on the empty
// cluster (forNodes); a change of the cluster (Requeue) makes both ready.
func TestRoomFreedLeavesPodsForNodesBackingOff(t *testing.T) {
	q, t0, room, never := failedTwo(true)
	pods := []*corev1.Pod{room, never}
	q.RoomFreed(t0.Add(60 * time.Millisecond))
	ready, _, waiting, _ := q.Ready(pods, t0.Add(70*time.Millisecond))
	if len(ready) != 1 || ready[0] != room || waiting != 1 {
		t.Fatalf("after a pod's end: ready %v, %d backing off; want the pod room may help alone", names(ready), waiting)
	}
	q.Failed(room.UID, t0.Add(80*time.Millisecond), false)
	q.Requeue(t0.Add(90 * time.Millisecond))
	if ready, _, waiting, _ := q.Ready(pods, t0.Add(100*time.Millisecond)); len(ready) != 2 || waiting != 0 {
		t.Errorf("after a node's change: ready %v, %d backing off; want both", names(ready), waiting)
	}
}

func names(ps []*corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// Placer's record says which failures only a change of the cluster can
// lift (Failure.ForNodes): a pod of more GPUs than any node has; not a pod
// that would fit were the nodes empty, nor one that no node admits
// because of bound pods (its anti-affinity: a node rule, which a bound
// pod's end lifts; Placer finds it could never run, and the exclusions
// say why not to believe it).
func TestFailuresForNodesAlone(t *testing.T) {
	solve := solver(t)
	web := map[string]string{"app": "web"}
	bound := []*corev1.Pod{pod("full-1", 8, "1", web), pod("full-2", 8, "1", web)}
	bound[0].Spec.NodeName, bound[1].Spec.NodeName = "n01", "n02"
	out := run(t, solve, nodes(2, 2), bound, []*corev1.Pod{pod("huge", 16, "1", nil), pod("later", 8, "1", nil),
		anti(pod("apart", 1, "1", web), translate.HostnameKey, web)}, nil)
	got := map[string]bool{}
	for _, f := range out.Failed {
		got[f.Pod.Name] = f.ForNodes
	}
	if want := map[string]bool{"huge": true, "later": false, "apart": false}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ForNodes %v, want %v (bound %v; why %v)", got, want, boundTo(out), failedWhy(out))
	}
	for _, tc := range []struct {
		up   *wire.UnplacedT
		want bool
	}{
		{nil, false},
		{&wire.UnplacedT{Never: false, Excluded: []*wire.ExclusionCountT{{Reason: wire.NodeExclusionGpus}}}, false},
		{&wire.UnplacedT{Never: true, Excluded: []*wire.ExclusionCountT{{Reason: wire.NodeExclusionGpus}, {Reason: wire.NodeExclusionTaint}}}, true},
		{&wire.UnplacedT{Never: true, Excluded: []*wire.ExclusionCountT{{Reason: wire.NodeExclusionGpus}, {Reason: wire.NodeExclusionAffinity}}}, false},
		{&wire.UnplacedT{Never: true, Excluded: []*wire.ExclusionCountT{{Reason: wire.NodeExclusionTaken}}}, false},
	} {
		if ForNodes(tc.up) != tc.want {
			t.Errorf("ForNodes(%+v) = %v", tc.up, !tc.want)
		}
	}
}

// The cycle's order: priority first; at a priority, the pods not tried
// yet before those that failed (by their last attempt), then creation; a
// group as its most urgent member, whole across the cut.
func TestQueueOrderAndCut(t *testing.T) {
	q := NewQueue()
	now := time.Unix(1000, 0)
	prio := func(p *corev1.Pod, v int32) *corev1.Pod { p.Spec.Priority = &v; return p }
	old1, old2 := pod("old-1", 0, "1", nil), pod("old-2", 0, "1", nil)
	g1 := pod("g-1", 0, "1", map[string]string{translate.PodGroupLabel: "g"})
	fresh := pod("fresh", 0, "1", nil)
	g2 := pod("g-2", 0, "1", map[string]string{translate.PodGroupLabel: "g"})
	high := prio(pod("high", 0, "1", nil), 100)
	q.Failed(old1.UID, now.Add(-20*time.Second), false)
	q.Failed(old2.UID, now.Add(-30*time.Second), false)
	ready, _, waiting, _ := q.Ready([]*corev1.Pod{old1, old2, g1, fresh, g2, high}, now)
	var names []string
	for _, p := range ready {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "high,g-1,g-2,fresh,old-2,old-1" || waiting != 0 {
		t.Fatalf("order %v (%d waiting)", names, waiting)
	}
	cut, left := Cut(ready, nil, 2)
	names = nil
	for _, p := range cut {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "g-1,g-2,high" || left != 3 {
		t.Errorf("cut %v, %d left", names, left)
	}
	// A member backing off comes along with a group that is ready.
	q.Failed(g2.UID, now, false)
	if ready, _, _, _ = q.Ready([]*corev1.Pod{g1, g2}, now); len(ready) != 2 {
		t.Errorf("the group split: %d ready", len(ready))
	}
	q.Failed(g1.UID, now, false)
	if ready, _, waiting, _ = q.Ready([]*corev1.Pod{g1, g2}, now); len(ready) != 0 || waiting != 2 {
		t.Errorf("the group backing off: %d ready, %d waiting", len(ready), waiting)
	}
	// A higher priority backing off comes along with a lower one that is
	// ready, after it in the cut, room permitting; the same priority does not.
	q.Failed(high.UID, now, false)
	ready, urgent, _, _ := q.Ready([]*corev1.Pod{high, fresh, old1}, now)
	if len(ready) != 2 || ready[0] != fresh || len(urgent) != 1 || urgent[0] != high {
		t.Fatalf("ready %d, urgent %d", len(ready), len(urgent))
	}
	if cut, _ := Cut(ready, urgent, 3); len(cut) != 3 || cut[2] != high {
		t.Errorf("cut of 3: %d pods", len(cut))
	}
	if cut, _ := Cut(ready, urgent, 2); len(cut) != 2 || cut[0] != fresh {
		t.Errorf("cut of 2: %d pods", len(cut))
	}
}

// A unit that waits for a later round (its anti-affinity partner goes
// first) keeps a lower priority out of the round before: the low pod does
// not take the one node the high pod needs.
func TestLaterRoundsKeepPriority(t *testing.T) {
	solve := solver(t)
	high := func(p *corev1.Pod) *corev1.Pod { v := int32(100); p.Spec.Priority = &v; return p }
	a := high(anti(pod("a", 8, "1", map[string]string{"app": "x"}), "topology.kubernetes.io/zone", map[string]string{"app": "x"}))
	b := high(anti(pod("b", 8, "1", map[string]string{"app": "x"}), "topology.kubernetes.io/zone", map[string]string{"app": "x"}))
	low := pod("low", 8, "1", nil)
	// Two zones of one node each: a in one, b in the other; low fits nowhere after them.
	out := run(t, solve, nodes(2, 1), nil, []*corev1.Pod{a, b, low}, nil)
	bt := boundTo(out)
	if bt["a"] == "" || bt["b"] == "" || bt["low"] != "" {
		t.Fatalf("bound %v: the low pod took a node the later round's high pod needed", bt)
	}
}

// A gang whose pods Placer put together on a node that holds fewer pods
// goes again off that node, and is placed elsewhere.
func TestGangOffANodeThatCannotHoldItsPods(t *testing.T) {
	solve := solver(t)
	ns := nodes(2, 2)
	ns[0].Status.Allocatable[corev1.ResourcePods] = resource.MustParse("2")
	g := map[string]string{translate.PodGroupLabel: "small"}
	var pending []*corev1.Pod
	for i := 0; i < 4; i++ {
		pending = append(pending, pod(fmt.Sprintf("s-%d", i), 1, "1", g))
	}
	groups := map[string]Group{"podgroup/ns/small": {Gang: true, Name: "pod group small", MinName: "minMember"}}
	out := run(t, solve, ns, nil, pending, groups)
	per := map[string]int{}
	for _, n := range boundTo(out) {
		per[n]++
	}
	if len(out.Binds) != 4 || per["n01"] > 2 {
		t.Fatalf("bound %v (per node %v) in %d rounds", boundTo(out), per, out.Rounds)
	}
}

// A pod outbid in its round is told what the node lacks once the winner
// is bound, as kube-scheduler would tell it then.
func TestOutbidToldWhatTheNodeLacks(t *testing.T) {
	solve := solver(t)
	hi := pod("high", 8, "1", nil)
	v := int32(100)
	hi.Spec.Priority = &v
	out := run(t, solve, nodes(1, 1), nil, []*corev1.Pod{pod("low", 8, "1", nil), hi}, nil)
	if b := boundTo(out); b["high"] != "n01" || b["low"] != "" {
		t.Fatalf("bound %v", b)
	}
	if why := failedWhy(out)["low"]; why != "0/1 nodes are available: 1 Insufficient nvidia.com/gpu." {
		t.Errorf("low: %q", why)
	}
}

// Pods pinned each to its own node (a nodeSelector on the hostname: a
// per-node job across the cluster) make one constraint set per pod, and
// Placer refuses a round of more sets x node groups than it evaluates
// (2000 pods on 3000 nodes: 2,001 x 2,001 groups, 8 M, past 4 M). The round
// goes again with its first half, the rest in the next wave, and every pod
// is placed on its node in one cycle; none is failed for the others' sake.
func TestPinnedPodsPastPlacersConstraintBoundGoInHalves(t *testing.T) {
	solve := solver(t)
	ns := make([]*corev1.Node, 0, 3000)
	for i := 0; i < 3000; i++ {
		n := nodes(1, 1)[0]
		n.Name = fmt.Sprintf("node-%04d", i)
		n.Labels[translate.HostnameKey] = n.Name
		ns = append(ns, n)
	}
	var pending []*corev1.Pod
	for i := 0; i < 2000; i++ {
		p := pod(fmt.Sprintf("pin-%04d", i), 1, "1", nil)
		p.Spec.NodeSelector = map[string]string{translate.HostnameKey: fmt.Sprintf("node-%04d", i)}
		pending = append(pending, p)
	}
	out := runOpt(t, solve, translate.Options{}, ns, nil, pending, nil)
	if out.Err != "" {
		t.Fatalf("the cycle failed: %s", out.Err)
	}
	if len(out.Binds) != 2000 || len(out.Failed) != 0 || len(out.Untried) != 0 {
		t.Fatalf("%d bound, %d failed, %d untried; want 2000 bound", len(out.Binds), len(out.Failed), len(out.Untried))
	}
	for _, b := range out.Binds {
		if want := "node-" + strings.TrimPrefix(b.Pod.Name, "pin-"); b.Node != want {
			t.Fatalf("%s on %s, want %s", b.Pod.Name, b.Node, want)
		}
	}
	if out.Rounds != 2 {
		t.Errorf("%d waves, want 2: the first half in the first, the second half in the next", out.Rounds)
	}
}

// Pods alike but for their volumes (a StatefulSet's, each with its own
// claim): each goes where its PersistentVolume's node affinity allows, as
// kube-scheduler's VolumeBinding, and one whose volume's nodes cannot take
// it is told so in kube-scheduler's words. 140 nodes in two zones of 70:
// a zonal volume's zone is more nodes than a requirement lists, so its
// other zone is excluded by a label of the round's own.
func TestPodsGoWhereTheirVolumesAre(t *testing.T) {
	solve := solver(t)
	ns := nodes(140, 70)
	on := func(key string, op corev1.NodeSelectorOperator, values ...string) *corev1.NodeSelector {
		return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: key, Operator: op, Values: values}}}}}
	}
	zone := "topology.kubernetes.io/zone"
	bound := func(sels ...*corev1.NodeSelector) *translate.Volumes { return &translate.Volumes{Bound: sels} }
	volumes := map[string]*translate.Volumes{
		"db-0": bound(on(translate.HostnameKey, corev1.NodeSelectorOpIn, "n03")),
		"db-1": bound(on(zone, corev1.NodeSelectorOpIn, "zone-2")),
		"db-2": bound(on(translate.HostnameKey, corev1.NodeSelectorOpIn, "n01")), // full
		"db-3": bound(on("example.com/disk", corev1.NodeSelectorOpExists)),       // no node has its label
		"db-4": bound(on(zone, corev1.NodeSelectorOpIn, "zone-2"), on(translate.HostnameKey, // two volumes: both hold
			corev1.NodeSelectorOpIn, "n01", "n02", "n71")),
		// claims to provision: from a class of zone-1, on n05 (being provisioned there); on n72, outside its class's zone
		"db-6": {Provision: []*corev1.NodeSelector{on(zone, corev1.NodeSelectorOpIn, "zone-1")}},
		"db-7": {Provision: []*corev1.NodeSelector{on(zone, corev1.NodeSelectorOpIn, "zone-1")}, Node: "n05"},
		"db-8": {Provision: []*corev1.NodeSelector{on(zone, corev1.NodeSelectorOpIn, "zone-1")}, Node: "n72"},
		// and where their drivers' storage capacity holds them: on n20; nowhere
		"db-12": {Provision: []*corev1.NodeSelector{on(zone, corev1.NodeSelectorOpIn, "zone-1")},
			Capacity: []*corev1.NodeSelector{on(translate.HostnameKey, corev1.NodeSelectorOpIn, "n20", "n99")}},
		"db-13": {Capacity: []*corev1.NodeSelector{{NodeSelectorTerms: []corev1.NodeSelectorTerm{}}}},
		// bound volumes' zone labels (VolumeZone): zone-2; a zone no node is in
		"db-14": {Zone: []*corev1.NodeSelector{on(zone, corev1.NodeSelectorOpIn, "zone-2")}},
		"db-15": {Zone: []*corev1.NodeSelector{on(zone, corev1.NodeSelectorOpIn, "zone-9")}},
	}
	// Pre-made: two local volumes, on n10 and n11, three claims alike that
	// either could take: two placed, on distinct nodes, the third told why.
	local := func(name, node string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: on(translate.HostnameKey, corev1.NodeSelectorOpIn, node)}}}
	}
	nvme := []*corev1.PersistentVolume{local("pv-a", "n10"), local("pv-b", "n11")}
	for i := 9; i < 12; i++ {
		volumes[fmt.Sprintf("db-%d", i)] = &translate.Volumes{PreMade: []translate.PreMade{{Claim: fmt.Sprintf("scratch-db-%d", i), Key: "nvme", Volumes: nvme}}}
	}
	opt := translate.Options{TopologyLabels: []string{"placer.io/rack"}, VolumeNodes: func(p *corev1.Pod) *translate.Volumes {
		return volumes[p.Name]
	}}
	occupant := pod("occupant", 8, "1", nil)
	occupant.Spec.NodeName = "n01"
	var pending []*corev1.Pod
	for i := 0; i < 16; i++ { // db-5: no volume of its own
		pending = append(pending, pod(fmt.Sprintf("db-%d", i), 4, "1", map[string]string{"app": "db"}))
	}
	out := runOpt(t, solve, opt, ns, []*corev1.Pod{occupant}, pending, nil)
	b := boundTo(out)
	if b["db-0"] != "n03" || b["db-4"] != "n71" || b["db-5"] == "" || b["db-2"] != "" || b["db-3"] != "" {
		t.Fatalf("bound %v", b)
	}
	if n, _ := strconv.Atoi(strings.TrimPrefix(b["db-1"], "n")); n < 71 {
		t.Errorf("db-1 on %s, outside its volume's zone-2", b["db-1"])
	}
	if n, _ := strconv.Atoi(strings.TrimPrefix(b["db-6"], "n")); n < 2 || n > 70 {
		t.Errorf("db-6 on %s, outside its class's zone-1 (or on the full n01)", b["db-6"])
	}
	if b["db-12"] != "n20" || b["db-13"] != "" {
		t.Errorf("db-12 on %q, db-13 on %q: want n20 (n99 is outside its class's zone) and none", b["db-12"], b["db-13"])
	}
	if n, _ := strconv.Atoi(strings.TrimPrefix(b["db-14"], "n")); n < 71 || b["db-15"] != "" {
		t.Errorf("db-14 on %s, outside its volume's zone-2; db-15 on %q", b["db-14"], b["db-15"])
	}
	if b["db-7"] != "n05" || b["db-8"] != "" {
		t.Errorf("db-7 on %q, db-8 on %q: want n05 and none", b["db-7"], b["db-8"])
	}
	var took []string
	for _, x := range out.Binds {
		for claim, pv := range x.Volumes {
			if claim != "scratch-"+x.Pod.Name {
				t.Errorf("%s given %s's claim", x.Pod.Name, claim)
			}
			took = append(took, pv+"@"+x.Node)
		}
	}
	sort.Strings(took)
	var left []string
	for i := 9; i < 12; i++ {
		if p := fmt.Sprintf("db-%d", i); b[p] == "" {
			left = append(left, p)
		}
	}
	if strings.Join(took, ",") != "pv-a@n10,pv-b@n11" || len(left) != 1 {
		t.Fatalf("db-9..11's volumes %v, not placed %v: want pv-a on n10 and pv-b on n11, one pod left", took, left)
	}
	// The nodes full once the round's pods are bound (n01, the occupant's,
	// and those its round filled) are told so first, as NodeResourcesFit
	// comes first.
	for p, want := range map[string]string{
		left[0]: "didn't find available persistent volumes to bind",
		"db-2":  "had volume node affinity conflict",
		"db-3":  "had volume node affinity conflict",
		"db-8":  "didn't find available persistent volumes to bind",
		"db-13": "did not have enough free storage",
		"db-15": "had no available volume zone",
	} {
		why := failedWhy(out)[p]
		m := regexp.MustCompile(`^0/140 nodes are available: (\d+) node\(s\) ` + regexp.QuoteMeta(want) + `, (\d+) Insufficient nvidia.com/gpu\.$`).FindStringSubmatch(why)
		if m == nil || m[2] == "0" {
			t.Errorf("%s: %q, want %q for the nodes not full", p, why, want)
		} else if n, _ := strconv.Atoi(m[1]); strconv.Itoa(140-n) != m[2] {
			t.Errorf("%s: %q counts %s nodes", p, why, m[1])
		}
	}
}

// fakeAttach: a translate.Attacher of fixed volumes and nodes.
type fakeAttach struct {
	vols     map[string]map[string]translate.CSIVolume // by pod name
	nodes    map[string]translate.NodeAttach
	required map[string]bool
}

func (f fakeAttach) Volumes(p *corev1.Pod) map[string]translate.CSIVolume { return f.vols[p.Name] }
func (f fakeAttach) Node(name string) translate.NodeAttach                { return f.nodes[name] }
func (f fakeAttach) Required(d string) bool                               { return f.required[d] }

// CSI volumes within each node's attach limits (kube-scheduler's
// NodeVolumeLimits): n01 attaches two of ebs and has one (a
// VolumeAttachment no pod uses), n02 one, used by a running pod whose
// volume a pending pod shares; n03..n06 do not have the ebs driver, which
// refuses such nodes. Of three pods alike, each with a volume of its own,
// one is bound (to n01); the two others are told why. The pod sharing the
// running pod's volume goes to the full n02; one with a new volume does
// not. An in-tree volume migrated to the driver is not counted on n06,
// which has no CSINode.
func TestPodsWithinNodesAttachLimits(t *testing.T) {
	solve := solver(t)
	ns := nodes(6, 6)
	const ebs = "ebs.example.com"
	v := func(d string) translate.CSIVolume { return translate.CSIVolume{Driver: d} }
	f := fakeAttach{vols: map[string]map[string]translate.CSIVolume{"occupant": {"ebs/shared": v(ebs)}, "reader": {"ebs/shared": v(ebs)},
		"writer": {"ebs/w": v(ebs)}, "legacy": {"ebs/l": {Driver: ebs, InTree: true}}},
		nodes: map[string]translate.NodeAttach{
			"n01": {Drivers: map[string]int64{ebs: 2}, Attached: map[string]string{"ebs/old": ebs}},
			"n02": {Drivers: map[string]int64{ebs: 1}},
			"n03": {Drivers: map[string]int64{"other": 9}}, "n04": {Drivers: map[string]int64{"other": 9}}, "n05": {Drivers: map[string]int64{}},
		},
		required: map[string]bool{ebs: true}}
	var pending []*corev1.Pod
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("v%d", i)
		f.vols[name] = map[string]translate.CSIVolume{"ebs/" + name: v(ebs)}
		pending = append(pending, pod(name, 1, "1", nil))
	}
	for _, x := range [][2]string{{"reader", "n02"}, {"writer", "n02"}, {"legacy", "n06"}} {
		p := pod(x[0], 1, "1", nil)
		p.Spec.NodeSelector = map[string]string{translate.HostnameKey: x[1]}
		pending = append(pending, p)
	}
	occupant := pod("occupant", 1, "1", nil)
	occupant.Spec.NodeName = "n02"
	out := runOpt(t, solve, translate.Options{Attach: f}, ns, []*corev1.Pod{occupant}, pending, nil)
	b := boundTo(out)
	var on []string
	for i := 1; i <= 3; i++ {
		on = append(on, b[fmt.Sprintf("v%d", i)])
	}
	sort.Strings(on)
	if strings.Join(on, ",") != ",,n01" || b["reader"] != "n02" || b["writer"] != "" || b["legacy"] != "n06" {
		t.Fatalf("bound %v: want one of v1..v3 on n01, reader on n02, writer nowhere, legacy on n06", b)
	}
	want := map[string]string{
		"writer": "0/6 nodes are available: 1 node(s) exceed max volume count, 5 node(s) didn't match Pod's node affinity/selector.",
	}
	for i := 1; i <= 3; i++ {
		if name := fmt.Sprintf("v%d", i); b[name] == "" {
			want[name] = "0/6 nodes are available: 2 node(s) exceed max volume count, 4 ebs.example.com CSI driver is not installed on the node."
		}
	}
	for p, w := range want {
		if why := failedWhy(out)[p]; why != w {
			t.Errorf("%s: %q, want %q", p, why, w)
		}
	}
}

// restartAll: p with a container restart rule RestartAllContainers (a
// training pod's in-place restart), a feature nodes must declare.
func restartAll(p *corev1.Pod) *corev1.Pod {
	never := corev1.ContainerRestartPolicyNever
	p.Spec.Containers[0].RestartPolicy = &never
	p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	return p
}

// Pods that need a node feature (kube-scheduler's NodeDeclaredFeatures)
// go only to the nodes that declare it: of four nodes, n01 and n02 do
// (their kubelets are as new as the control plane), n03 and n04 do not.
// Three whole-node pods that restart all their containers: two bound, on
// n01 and n02; the third told why in kube-scheduler's words (the node the
// fourth pod took half of lacks room first). A pod
// without the rule goes anywhere; without the control plane's version,
// nothing is read.
func TestPodsGoWhereTheirFeaturesAre(t *testing.T) {
	solve := solver(t)
	ns := nodes(4, 4)
	for _, n := range ns[:2] {
		n.Status.DeclaredFeatures = []string{"RestartAllContainersOnContainerExits"}
	}
	pending := []*corev1.Pod{restartAll(pod("t1", 8, "1", nil)), restartAll(pod("t2", 8, "1", nil)), restartAll(pod("t3", 8, "1", nil)),
		pod("plain", 4, "1", nil)}
	opt := translate.Options{TopologyLabels: []string{"placer.io/rack"}, ControlPlane: version.MustParseGeneric("1.37.2")}
	out := runOpt(t, solve, opt, ns, nil, pending, nil)
	b := boundTo(out)
	var on []string
	for _, p := range []string{"t1", "t2", "t3"} {
		on = append(on, b[p])
	}
	sort.Strings(on)
	if strings.Join(on, ",") != ",n01,n02" || b["plain"] == "" {
		t.Fatalf("bound %v: want two of t1..t3 on n01 and n02, plain anywhere", b)
	}
	for p, why := range failedWhy(out) {
		if want := "0/4 nodes are available: 1 node(s) didn't match Pod's required features, 3 Insufficient nvidia.com/gpu."; why != want {
			t.Errorf("%s: %q, want %q", p, why, want)
		}
	}
	opt.ControlPlane = nil
	if b := boundTo(runOpt(t, solve, opt, ns, nil, pending, nil)); len(b) != 4 {
		t.Errorf("without the control plane's version: bound %v, want all four", b)
	}
}

// A claim of access mode ReadWriteOncePod is one pod's at a time (kube-
// scheduler's VolumeRestrictions): a pod on a node holds "held", and the
// two pending pods of it wait, told so; of two pending pods of "free", one
// is bound and the other waits; an older pod of "late" that cannot be
// placed (16 GPUs) leaves it to a younger one, which is bound.
func TestReadWriteOncePodClaimOnePodAtATime(t *testing.T) {
	solve := solver(t)
	ns := nodes(4, 4)
	using := map[string]string{"holder": "held", "h1": "held", "h2": "held", "f1": "free", "f2": "free", "stuck": "late", "next": "late"}
	withClaim := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: using[p.Name]}}}}
		return p
	}
	holder := withClaim(pod("holder", 1, "1", nil))
	holder.Spec.NodeName = "n01"
	pending := []*corev1.Pod{withClaim(pod("stuck", 16, "1", nil))}
	for _, name := range []string{"h1", "h2", "f1", "f2", "next"} {
		pending = append(pending, withClaim(pod(name, 1, "1", nil)))
	}
	opt := translate.Options{TopologyLabels: []string{"placer.io/rack"}, SoloClaims: func(p *corev1.Pod) []string { return translate.ClaimNames(p) }}
	out := runOpt(t, solve, opt, ns, []*corev1.Pod{holder}, pending, nil)
	b := boundTo(out)
	if b["h1"] != "" || b["h2"] != "" || (b["f1"] == "") == (b["f2"] == "") || b["stuck"] != "" || b["next"] == "" {
		t.Fatalf("bound %v: want neither h1 nor h2, one of f1 and f2, next and not stuck", b)
	}
	waits := "0/4 nodes are available: 4 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod."
	for p, why := range failedWhy(out) {
		if p != "stuck" && why != waits {
			t.Errorf("%s: %q, want %q", p, why, waits)
		}
	}
}
