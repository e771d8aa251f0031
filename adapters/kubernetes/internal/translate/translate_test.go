package translate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

func node(name, rack string, gpus int64) *corev1.Node {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1536Gi"),
		GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"placer.io/rack": rack, GPUProduct: "H100", HostnameKey: name}},
		Status: corev1.NodeStatus{Allocatable: rl, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func pod(name string, gpus int64, cpu string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "uid-" + "name", Labels: map[string]string{}},
		Spec: corev1.PodSpec{SchedulerName: "placer", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}
}

func TestBoundPodsUseTheirNodes(t *testing.T) {
	b := pod("running", 3, "10")
	b.Spec.NodeName = "n1"
	done := pod("finished", 8, "10")
	done.Spec.NodeName = "n2"
	done.Status.Phase = corev1.PodSucceeded
	r := Build([]*corev1.Node{node("n2", "r1", 8), node("n1", "r1", 8)}, []*corev1.Pod{b, done}, []*corev1.Pod{pod("p", 1, "1")}, nil, Options{RackLabel: "placer.io/rack"}, 100)
	n := r.Request.Cluster.Nodes
	if n[0].Name != "n1" {
		t.Fatalf("nodes not in name order: %s", n[0].Name)
	}
	free := 0
	for _, g := range n[0].GpuFreeMilli {
		if g == 1000 {
			free++
		}
	}
	// A finished pod holds nothing (Bound); Build is given only the bound ones by the caller, so n2 counts it here.
	if free != 5 || n[0].CpuMilliFree != 86000 {
		t.Errorf("n1: %d GPUs free, %d mCPU free; want 5 and 86000", free, n[0].CpuMilliFree)
	}
	if Bound(done) {
		t.Errorf("a finished pod counts as bound")
	}
	if n[0].Pool != wire.PoolShared || !n[0].Healthy || n[0].Domain != 1 {
		t.Errorf("node defaults: pool %v healthy %v domain %d", n[0].Pool, n[0].Healthy, n[0].Domain)
	}
	j := r.Request.Pending[0]
	if j.Demand.Gpus != 1 || j.Demand.GpuMilli != 1000 || j.Demand.CpuMilli != 1000 || j.Replicas != 1 || j.TopologyLevel != -1 {
		t.Errorf("job: %+v %+v", j, j.Demand)
	}
}

func TestGangWaitsForMinMemberThenIsOneJob(t *testing.T) {
	mk := func(name string) *corev1.Pod {
		p := pod(name, 8, "4")
		p.Labels[PodGroupLabel] = "train"
		p.Annotations = map[string]string{MinMemberAnnot: "3"}
		return p
	}
	nodes := []*corev1.Node{node("n1", "r1", 8), node("n2", "r2", 8), node("n3", "r2", 8)}
	r := Build(nodes, nil, []*corev1.Pod{mk("a"), mk("b")}, nil, Options{RackLabel: "placer.io/rack"}, 1)
	if len(r.Request.Pending) != 0 || len(r.Skipped) != 2 || !strings.Contains(r.Skipped[0].Why, "2 of its minMember 3") {
		t.Fatalf("a gang short of members: %d jobs, skipped %+v", len(r.Request.Pending), r.Skipped)
	}
	r = Build(nodes, nil, []*corev1.Pod{mk("c"), mk("a"), mk("b")}, nil, Options{RackLabel: "placer.io/rack"}, 1)
	if len(r.Request.Pending) != 1 {
		t.Fatalf("want one job, got %d (skipped %+v)", len(r.Request.Pending), r.Skipped)
	}
	j := r.Request.Pending[0]
	if !j.Gang || j.Replicas != 3 || j.TopologyLevel != 1 || j.TopologyMode != wire.TopologyModePreferred {
		t.Errorf("gang job: %+v", j)
	}
	if g := r.Groups[0]; g.Pods[0].Name != "a" || g.Pods[2].Name != "c" {
		t.Errorf("replicas not in pod name order")
	}
	// A PodGroup's minMember wins over the annotation.
	r = Build(nodes, nil, []*corev1.Pod{mk("a"), mk("b")}, func(ns, name string) (int, bool) { return 2, true }, Options{}, 1)
	if len(r.Request.Pending) != 1 || !r.Request.Pending[0].Gang {
		t.Errorf("PodGroup minMember 2 with two pods: %+v", r.Skipped)
	}
}

func TestAntiAffinityIsDistinctNodesAndExcludesTakenNodes(t *testing.T) {
	mk := func(name string) *corev1.Pod {
		p := pod(name, 1, "1")
		p.Labels["app"] = "web"
		p.OwnerReferences = []metav1.OwnerReference{{UID: "rs-1", Controller: ptr(true), Kind: "ReplicaSet", Name: "web", APIVersion: "apps/v1"}}
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: HostnameKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
		return p
	}
	running := mk("web-0")
	running.Spec.NodeName = "n2"
	r := Build([]*corev1.Node{node("n1", "r1", 8), node("n2", "r1", 8), node("n3", "r1", 8)}, []*corev1.Pod{running},
		[]*corev1.Pod{mk("web-1"), mk("web-2")}, nil, Options{}, 1)
	if len(r.Request.Pending) != 1 {
		t.Fatalf("want the owner's pods as one job: %d jobs, %+v", len(r.Request.Pending), r.Skipped)
	}
	j := r.Request.Pending[0]
	if !j.DistinctNodes || j.Replicas != 2 || j.Gang {
		t.Errorf("job %+v", j)
	}
	req := j.Constraints.Required
	if len(req) != 1 || len(req[0].MatchExpressions) != 1 || req[0].MatchExpressions[0].Operator != wire.SelectorOperatorNotIn ||
		strings.Join(req[0].MatchExpressions[0].Values, ",") != "n2" {
		t.Errorf("required terms: %+v", req)
	}
}

func TestInexpressiblePodsAreSkippedAlone(t *testing.T) {
	bad := pod("bad", 1, "1")
	bad.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{TopologyKey: "zone"}}
	other := pod("other", 1, "1")
	other.Spec.Containers[0].Resources.Requests["example.com/fpga"] = resource.MustParse("1")
	r := Build([]*corev1.Node{node("n1", "r1", 8)}, nil, []*corev1.Pod{bad, other, pod("good", 1, "1")}, nil, Options{}, 1)
	if len(r.Request.Pending) != 1 || r.Groups[0].Pods[0].Name != "good" {
		t.Fatalf("the expressible pod is not the round's one job")
	}
	if len(r.Skipped) != 2 || !strings.Contains(r.Skipped[0].Why, "topologySpreadConstraints") ||
		!strings.Contains(r.Skipped[1].Why, "example.com/fpga") || r.Skipped[0].Reason != "SchedulerError" {
		t.Errorf("skipped: %+v", r.Skipped)
	}
}

func TestConstraintsMapped(t *testing.T) {
	p := pod("p", 1, "1")
	p.Spec.NodeSelector = map[string]string{"b": "2", "a": "1"}
	p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpGt, Values: []string{"3"}}}}}},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 7, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}}}}}}}
	prio := int32(1000)
	p.Spec.Priority = &prio
	p.Labels[QueueLabel] = "team-a"
	r := Build([]*corev1.Node{node("n1", "r1", 8)}, nil, []*corev1.Pod{p}, nil, Options{}, 1)
	j := r.Request.Pending[0]
	c := j.Constraints
	if strings.Join(c.NodeSelector, ",") != "a=1,b=2" || len(c.Required) != 1 || c.Required[0].MatchExpressions[0].Operator != wire.SelectorOperatorGt ||
		len(c.Preferred) != 1 || c.Preferred[0].Weight != 7 || len(c.Tolerations) != 1 ||
		c.Tolerations[0].Operator != wire.TolerationOperatorExists || c.Tolerations[0].Effect != wire.TolerationEffectNoSchedule {
		t.Errorf("constraints: %+v", c)
	}
	if j.Priority != 1000 || j.Queue != "team-a" {
		t.Errorf("priority %d queue %q", j.Priority, j.Queue)
	}
}

func TestMessageIsKubeSchedulersWords(t *testing.T) {
	u := &wire.UnplacedT{Reason: wire.UnplacedReasonNoFeasibleNode, Detail: "no node can host one replica. 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}
	if m := Message(u); m != "0/4 nodes are available: 4 Insufficient nvidia.com/gpu." {
		t.Errorf("message %q", m)
	}
	if m := Message(&wire.UnplacedT{Reason: wire.UnplacedReasonQuotaExceeded, Detail: "queue q full"}); m != "QuotaExceeded: queue q full" {
		t.Errorf("message %q", m)
	}
	// A pod that can never run says so before the nodes' counts.
	never := &wire.UnplacedT{Reason: wire.UnplacedReasonGangIncomplete, Never: true,
		Detail: "gang of 65. It can never run on this cluster as it is: it needs 65 replicas at once, and the nodes that admit it could hold at most 64 even empty. 0/64 nodes are available: 64 Insufficient nvidia.com/gpu."}
	if m := Message(never); !strings.HasPrefix(m, "It can never run on this cluster") || !strings.Contains(m, "0/64 nodes are available") {
		t.Errorf("message %q", m)
	}
}

func TestGangOfEqualPodsWithAffinityIsOneJob(t *testing.T) {
	mk := func(name string) *corev1.Pod {
		p := pod(name, 4, "2")
		p.Labels[PodGroupLabel] = "g"
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: HostnameKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "g"}}}}}}
		return p
	}
	r := Build([]*corev1.Node{node("n1", "r1", 8), node("n2", "r1", 8)}, nil, []*corev1.Pod{mk("a"), mk("b")}, nil, Options{}, 1)
	if len(r.Request.Pending) != 1 || !r.Request.Pending[0].DistinctNodes || !r.Request.Pending[0].Gang {
		t.Fatalf("equal gang members (separate Affinity objects) are not one distinct-nodes gang: %+v", r.Skipped)
	}
	other := mk("c")
	other.Spec.Containers[0].Resources.Requests[GPUResource] = *resource.NewQuantity(2, resource.DecimalSI)
	r = Build([]*corev1.Node{node("n1", "r1", 8)}, nil, []*corev1.Pod{mk("a"), other}, nil, Options{}, 1)
	if len(r.Request.Pending) != 0 || len(r.Skipped) != 2 || !strings.Contains(r.Skipped[0].Why, "differ") {
		t.Errorf("unequal gang members: %+v", r.Skipped)
	}
}

func TestPartlyBoundGangIsCompletedNearItsMembers(t *testing.T) {
	mk := func(name, node string) *corev1.Pod {
		p := pod(name, 8, "4")
		p.Labels[PodGroupLabel] = "train"
		p.Annotations = map[string]string{MinMemberAnnot: "4"}
		p.Spec.NodeName = node
		return p
	}
	nodes := []*corev1.Node{node("n1", "r1", 8), node("n2", "r1", 8), node("n3", "r2", 8), node("n4", "r2", 8), node("n5", "r1", 8)}
	r := Build(nodes, []*corev1.Pod{mk("a", "n1"), mk("b", "n2")}, []*corev1.Pod{mk("c", ""), mk("d", "")}, nil, Options{RackLabel: "placer.io/rack"}, 1)
	if len(r.Request.Pending) != 1 {
		t.Fatalf("the rest of a partly bound gang is not a job: %+v", r.Skipped)
	}
	j := r.Request.Pending[0]
	pref := j.Constraints.Preferred
	if j.Replicas != 2 || !j.Gang || len(pref) != 1 || pref[0].Weight != 100 || pref[0].Preference.MatchExpressions[0].Values[0] != "r1" {
		t.Errorf("job %+v, preferred %+v", j, pref)
	}
}

func TestGPUSharesAreCountedOnTheirGPUs(t *testing.T) {
	share := func(name, node, milli, idx string) *corev1.Pod {
		p := pod(name, 0, "1")
		p.Annotations = map[string]string{GPUMilliAnnot: milli}
		if idx != "" {
			p.Annotations[GPUIndexAnnot] = idx
		}
		p.Spec.NodeName = node
		return p
	}
	whole := pod("whole", 2, "1")
	whole.Spec.NodeName = "n1"
	bound := []*corev1.Pod{share("s1", "n1", "500", "0"), share("s2", "n1", "250", "0"), share("s3", "n1", "300", "3"), whole}
	r := Build([]*corev1.Node{node("n1", "r1", 4)}, bound, []*corev1.Pod{share("new", "", "400", "")}, nil, Options{}, 1)
	got := r.Request.Cluster.Nodes[0].GpuFreeMilli
	if len(got) != 4 || got[0] != 250 || got[1] != 0 || got[2] != 0 || got[3] != 700 {
		t.Errorf("free milli per GPU: %v, want [250 0 0 700]", got)
	}
	j := r.Request.Pending[0]
	if j.Demand.Gpus != 1 || j.Demand.GpuMilli != 400 {
		t.Errorf("demand %+v", j.Demand)
	}
	bad := share("bad", "", "1500", "")
	both := share("both", "", "500", "")
	both.Spec.Containers[0].Resources.Requests[GPUResource] = *resource.NewQuantity(1, resource.DecimalSI)
	r = Build([]*corev1.Node{node("n1", "r1", 4)}, nil, []*corev1.Pod{bad, both}, nil, Options{}, 1)
	if len(r.Skipped) != 2 || !strings.Contains(r.Skipped[0].Why, "1..999") || !strings.Contains(r.Skipped[1].Why, "asks no whole GPUs") {
		t.Errorf("skipped %+v", r.Skipped)
	}
}

// --evict: bound pods of a lower priority than a pending pod are running
// jobs, preemptible, on GPU indices consistent with their nodes' free
// lists; terminating pods, DaemonSets' pods, pods of the pending priority
// and pods NotEvictable names are not; a pod group's members are one gang.
func TestEvictSendsLowerPriorityBoundPodsAsRunningJobs(t *testing.T) {
	prio := func(p *corev1.Pod, v int32) *corev1.Pod { p.Spec.Priority = &v; return p }
	on := func(p *corev1.Pod, n string) *corev1.Pod {
		p.Spec.NodeName = n
		p.UID = "uid-" + types.UID(p.Name)
		return p
	}
	low3 := prio(on(pod("low3", 3, "8"), "n1"), 10)
	same := prio(on(pod("same", 2, "8"), "n1"), 100)
	term := prio(on(pod("term", 1, "8"), "n1"), 10)
	now := metav1.Now()
	term.DeletionTimestamp = &now
	ds := prio(on(pod("ds", 0, "1"), "n2"), 10)
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "d", UID: "d", Controller: ptr(true)}}
	refused := prio(on(pod("refused", 1, "1"), "n2"), 10)
	g1 := prio(on(pod("g1", 4, "4"), "n2"), 5)
	g2 := prio(on(pod("g2", 4, "4"), "n3"), 5)
	for _, p := range []*corev1.Pod{g1, g2} {
		p.Labels[PodGroupLabel] = "train"
	}
	pending := prio(pod("urgent", 8, "8"), 100)
	nodes := []*corev1.Node{node("n1", "r1", 8), node("n2", "r1", 8), node("n3", "r1", 8)}
	opt := Options{Evict: true, NotEvictable: func(p *corev1.Pod) string {
		if p.Name == "refused" {
			return "refused"
		}
		return ""
	}}
	r := Build(nodes, []*corev1.Pod{low3, same, term, ds, refused, g1, g2}, []*corev1.Pod{pending}, nil, opt, 1000)
	if q := r.Request.Policy.Queue; q == nil || !q.Preemption || q.PreemptMaxLostS != -1 {
		t.Fatalf("policy: %+v", q)
	}
	names := map[string]*wire.RunningJobT{}
	for _, rj := range r.Request.Running {
		names[rj.Name] = rj
	}
	if len(names) != 2 || names["running/pod/ns/low3"] == nil || names["running/podgroup/ns/train"] == nil {
		t.Fatalf("running jobs: %v", names)
	}
	lj := names["running/pod/ns/low3"]
	if !lj.Preemptible || lj.Priority != 10 || lj.Demand.Gpus != 3 || len(lj.Replicas) != 1 || len(lj.Replicas[0].Gpus) != 3 {
		t.Errorf("low3: %+v %+v", lj, lj.Replicas)
	}
	free := r.Request.Cluster.Nodes[0].GpuFreeMilli
	for _, g := range lj.Replicas[0].Gpus {
		if free[g] != 0 {
			t.Errorf("low3 on GPU %d, which n1's free list says is free", g)
		}
	}
	gj := names["running/podgroup/ns/train"]
	if !gj.Gang || len(gj.Replicas) != 2 || gj.Replicas[0].Node != 1 || gj.Replicas[1].Node != 2 {
		t.Errorf("the group: %+v", gj)
	}
	if len(r.Running["running/podgroup/ns/train"]) != 2 {
		t.Errorf("the group's pods: %v", r.Running)
	}
	r = Build(nodes, []*corev1.Pod{low3}, []*corev1.Pod{pending}, nil, Options{}, 1000)
	if len(r.Request.Running) != 0 || r.Request.Policy.Queue != nil {
		t.Errorf("without Evict: %d running jobs, queue policy %+v", len(r.Request.Running), r.Request.Policy.Queue)
	}
}

func ptr[T any](v T) *T { return &v }

// The native Workload API: pods naming a PodGroup (spec.schedulingGroup)
// with a gang policy are one gang job, waiting for minCount; its topology
// constraint on the rack label is a required rack; a basic policy's pods
// are jobs of their own; a missing PodGroup makes its pods wait.
func TestNativePodGroups(t *testing.T) {
	mk := func(name, group string) *corev1.Pod {
		p := pod(name, 8, "4")
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr(group)}
		return p
	}
	groups := map[string]NativeGroup{
		"gang":  {Found: true, Gang: true, MinCount: 3, Topology: []string{"placer.io/rack"}},
		"basic": {Found: true},
		"zone":  {Found: true, Gang: true, MinCount: 1, Topology: []string{"topology.kubernetes.io/zone"}},
	}
	opt := Options{RackLabel: "placer.io/rack", PodGroup: func(ns, name string) NativeGroup { return groups[name] }}
	nodes := []*corev1.Node{node("n1", "r1", 8), node("n2", "r1", 8), node("n3", "r2", 8)}
	pending := []*corev1.Pod{mk("a", "gang"), mk("b", "gang"), mk("x", "basic"), mk("y", "basic"), mk("g", "ghost"), mk("z", "zone")}
	r := Build(nodes, nil, pending, nil, opt, 1)
	why := map[string]string{}
	for _, s := range r.Skipped {
		why[s.Pod.Name] = s.Reason + ": " + s.Why
	}
	if !strings.Contains(why["a"], "Unschedulable: waiting for PodGroup ns/gang (scheduling.k8s.io/v1beta1): 2 of its gang minCount 3") ||
		!strings.Contains(why["g"], "Unschedulable: waiting for PodGroup ns/ghost (scheduling.k8s.io/v1beta1) to exist") ||
		!strings.Contains(why["z"], `SchedulerError: cannot express: PodGroup ns/zone (scheduling.k8s.io/v1beta1): topology key "topology.kubernetes.io/zone"`) {
		t.Errorf("skipped: %v", why)
	}
	if len(r.Groups) != 2 || r.Groups[0].Gang || r.Groups[1].Gang || len(r.Groups[0].Pods) != 1 {
		t.Errorf("the basic policy's pods: %+v", r.Groups)
	}
	r = Build(nodes, nil, append(pending[:2:2], mk("c", "gang")), nil, opt, 1)
	if len(r.Request.Pending) != 1 {
		t.Fatalf("the gang: %d jobs, skipped %+v", len(r.Request.Pending), r.Skipped)
	}
	if j := r.Request.Pending[0]; !j.Gang || j.Replicas != 3 || j.TopologyLevel != 1 || j.TopologyMode != wire.TopologyModeRequired {
		t.Errorf("the gang's job: %+v", j)
	}
}
