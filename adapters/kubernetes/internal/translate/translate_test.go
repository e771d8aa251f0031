package translate

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

func node(name, rack string, gpus int64) *corev1.Node {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1536Gi"),
		GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI), corev1.ResourcePods: resource.MustParse("110")}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"placer.io/rack": rack, GPUProduct: "H100", HostnameKey: name,
		"topology.kubernetes.io/zone": "zone-" + rack}},
		Status: corev1.NodeStatus{Allocatable: rl, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func pod(name string, gpus int64, cpu string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec: corev1.PodSpec{SchedulerName: "placer", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}
}

func ptr[T any](v T) *T { return &v }

// build: a round of one unit per pod.
func build(nodes []*corev1.Node, bound []*corev1.Pod, pending []*corev1.Pod, opt Options) *Round {
	var units []*Unit
	for _, p := range pending {
		units = append(units, &Unit{Key: "pod/" + p.Namespace + "/" + p.Name, Pods: []*corev1.Pod{p}})
	}
	return Build(NewCluster(nodes, bound, opt), units, 100)
}

func TestBoundPodsUseTheirNodes(t *testing.T) {
	b := pod("running", 3, "10")
	b.Spec.NodeName = "n1"
	r := build([]*corev1.Node{node("n2", "r1", 8), node("n1", "r1", 8)}, []*corev1.Pod{b}, []*corev1.Pod{pod("p", 1, "1")}, Options{TopologyLabels: []string{"placer.io/rack"}})
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
	if free != 5 || n[0].CpuMilliFree != 86000 {
		t.Errorf("n1: %d GPUs free, %d mCPU free; want 5 and 86000", free, n[0].CpuMilliFree)
	}
	done := b.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	if Bound(done) {
		t.Errorf("a finished pod counts as bound")
	}
	if n[0].Pool != wire.PoolShared || !n[0].Healthy || n[0].Domain != 1 {
		t.Errorf("node defaults: pool %v healthy %v domain %d", n[0].Pool, n[0].Healthy, n[0].Domain)
	}
	if got := n[0].Labels[len(n[0].Labels)-1]; got != NodeLabel+"=n1" {
		t.Errorf("the round's node label: %q", got)
	}
	j := r.Request.Pending[0]
	if j.Demand.Gpus != 1 || j.Demand.GpuMilli != 1000 || j.Demand.CpuMilli != 1000 || j.Replicas != 1 || j.TopologyLevel != -1 {
		t.Errorf("job: %+v %+v", j, j.Demand)
	}
}

// kube-scheduler's requests: native sidecars (init containers with
// restartPolicy Always) add to the containers; a regular init container
// counts with the sidecars started before it, the largest wins; pod-level
// requests replace the containers' CPU and memory; overhead adds.
func TestRequestsSumSidecarsAndPodLevelResources(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	req := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
	p := pod("sidecars", 0, "30")
	p.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Resources: req("20")},
		{Name: "proxy", RestartPolicy: &always, Resources: req("4")},
		{Name: "log", RestartPolicy: &always, Resources: req("2")},
		{Name: "late", Resources: req("33")}, // runs beside proxy and log: 39
	}
	cpu := Requests(p)[corev1.ResourceCPU]
	if cpu.MilliValue() != 39000 {
		t.Errorf("sidecars: %s CPU, want 39 (max(30+4+2, 33+4+2))", cpu.String())
	}
	p.Spec.InitContainers = p.Spec.InitContainers[:3]
	if cpu := Requests(p)[corev1.ResourceCPU]; cpu.MilliValue() != 36000 {
		t.Errorf("sidecars: %s CPU, want 36", cpu.String())
	}
	p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("40"),
		corev1.ResourceMemory: resource.MustParse("64Gi")}}
	p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
	rl := Requests(p)
	if c, m := rl[corev1.ResourceCPU], rl[corev1.ResourceMemory]; c.MilliValue() != 40250 || m.Value() != 64<<30 {
		t.Errorf("pod-level resources and overhead: %s CPU, %s memory", c.String(), m.String())
	}
	r := build([]*corev1.Node{node("n1", "r1", 8)}, nil, []*corev1.Pod{p}, Options{})
	if d := r.Request.Pending[0].Demand; d.CpuMilli != 40250 || d.MemoryMib != 64<<10 {
		t.Errorf("demand %+v", d)
	}
}

// A pod resized in place counts the larger of its spec and what its node
// allocated and actuated for it until the resize is done, as
// kube-scheduler counts it: shrunk from 80 CPUs to 16, it holds 80 while
// its kubelet has not given them back; grown from 16 to 80, it holds 80
// at once, unless its kubelet found the resize infeasible: then 16.
func TestResizedPodsHoldTheirLargerRequests(t *testing.T) {
	resized := func(spec, status string) *corev1.Pod {
		p := pod("resized", 0, spec)
		p.Spec.NodeName = "n1"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name,
			AllocatedResources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(status)},
			Resources:          &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(status)}}}}
		return p
	}
	for _, tc := range []struct{ spec, status string }{{"16", "80"}, {"80", "16"}, {"80", "80"}} {
		if cpu := Requests(resized(tc.spec, tc.status))[corev1.ResourceCPU]; cpu.Value() != 80 {
			t.Errorf("spec %s, status %s: %s CPUs, want 80", tc.spec, tc.status, cpu.String())
		}
	}
	p := resized("80", "16")
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible}}
	if cpu := Requests(p)[corev1.ResourceCPU]; cpu.Value() != 16 {
		t.Errorf("grown past its node, infeasible: %s CPUs, want 16", cpu.String())
	}
}

// Requests' shortcut (the spec's sum where the status holds no more) is
// kube-scheduler's count on random pods: containers, sidecars and init
// containers with random requests, statuses of random allocated and
// actuated resources or none, some resizes infeasible.
func TestRequestsShortcutIsKubeSchedulersCount(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 53))
	list := func() corev1.ResourceList {
		rl := corev1.ResourceList{}
		for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, GPUResource} {
			if r.IntN(3) > 0 {
				rl[k] = *resource.NewQuantity(int64(r.IntN(8)), resource.DecimalSI)
			}
		}
		return rl
	}
	always := corev1.ContainerRestartPolicyAlways
	shortcuts := 0
	for i := range 5000 {
		p := &corev1.Pod{}
		for k := range 1 + r.IntN(3) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprint("c", k), Resources: corev1.ResourceRequirements{Requests: list()}})
		}
		for k := range r.IntN(3) {
			c := corev1.Container{Name: fmt.Sprint("i", k), Resources: corev1.ResourceRequirements{Requests: list()}}
			if r.IntN(2) == 0 {
				c.RestartPolicy = &always
			}
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
		status := func(cs []corev1.Container) (out []corev1.ContainerStatus) {
			for _, c := range cs {
				if r.IntN(4) == 0 {
					continue
				}
				st := corev1.ContainerStatus{Name: c.Name, AllocatedResources: c.Resources.Requests.DeepCopy()}
				if r.IntN(3) == 0 {
					st.AllocatedResources = list()
				}
				if r.IntN(2) == 0 {
					st.Resources = &corev1.ResourceRequirements{Requests: st.AllocatedResources}
					if r.IntN(3) == 0 {
						st.Resources.Requests = list()
					}
				}
				out = append(out, st)
			}
			return out
		}
		p.Status.ContainerStatuses, p.Status.InitContainerStatuses = status(p.Spec.Containers), status(p.Spec.InitContainers)
		if r.IntN(10) == 0 {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible}}
		}
		if statusWithinSpec(p) {
			shortcuts++
		}
		same := func(a, b corev1.ResourceList) bool { // (a resource of 0 is as one not asked)
			for k := range a {
				if x, y := a[k], b[k]; x.Cmp(y) != 0 {
					return false
				}
			}
			for k := range b {
				if x, y := a[k], b[k]; x.Cmp(y) != 0 {
					return false
				}
			}
			return true
		}
		if got, want := Requests(p), resourcehelper.PodRequests(p, requestOptions); !same(got, want) {
			t.Fatalf("pod %d: %v, kube-scheduler's %v (%+v)", i, got, want, p)
		}
	}
	if shortcuts < 1000 || shortcuts > 4000 {
		t.Errorf("%d of 5,000 pods took the shortcut: the test does not exercise both ways", shortcuts)
	}
}

// What Placer does not count: a node with its pods' allowance used up,
// one without the ephemeral storage or the extended resource asked, one
// whose host port is taken are excluded, in kube-scheduler's words; and
// Take checks a round's placements one after the other.
func TestSideResourcesAndHostPorts(t *testing.T) {
	full := node("full", "r1", 8)
	full.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("1")
	disk := node("disk", "r1", 8)
	disk.Status.Allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse("100Gi")
	disk.Status.Allocatable["example.com/fpga"] = resource.MustParse("1")
	nodes := []*corev1.Node{full, disk, node("plain", "r1", 8)}
	occupant := pod("occupant", 0, "1")
	occupant.Spec.NodeName = "full"
	web := pod("web", 0, "1")
	web.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
	web.Spec.NodeName = "plain"
	p := pod("p", 0, "1")
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("60Gi")
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
	c := NewCluster(nodes, []*corev1.Pod{occupant, web}, Options{})
	rules, _ := c.rules(p)
	got := map[string]string{}
	for _, ru := range rules {
		got[ru.why] = strings.Join(ru.req.Values, ",")
	}
	if got[portsWhy] != "plain" || got["Too many pods"] != "full" || got["Insufficient ephemeral-storage"] != "plain" {
		t.Errorf("rules: %v", got)
	}
	di, _ := c.Index("disk")
	if why := c.Take(p, di, nil); why != "" {
		t.Errorf("disk refuses p: %s", why)
	}
	if why := c.Take(p, di, nil); why != portsWhy {
		t.Errorf("a second p on disk: %q, want the port clash", why)
	}
	q := pod("q", 0, "1")
	q.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("60Gi")
	if why := c.Take(q, di, nil); why != "Insufficient ephemeral-storage" {
		t.Errorf("q on disk after p: %q", why)
	}
	f := pod("f", 0, "1")
	f.Spec.Containers[0].Resources.Requests["example.com/fpga"] = resource.MustParse("1")
	if _, why := Signature(f, nil); why != "" {
		t.Errorf("an extended resource is not expressible: %s", why)
	}
	if rules, _ := c.rules(f); len(rules) != 2 || rules[0].why != "Insufficient example.com/fpga" || strings.Join(rules[0].req.Values, ",") != "plain" {
		t.Errorf("fpga rules: %+v", rules)
	}
	if !PortsClash(p, web) || PortsClash(p, q) {
		t.Errorf("PortsClash")
	}
}

func antiTerm(key string, match map[string]string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: match}}
}

// Required anti-affinity on any key, against the pods on the nodes, and
// theirs against the pod (kube-scheduler's symmetry); affinity to where
// matching pods run, or anywhere for the first of a series that matches
// itself.
func TestPodAffinityRules(t *testing.T) {
	nodes := []*corev1.Node{node("n1", "a", 8), node("n2", "a", 8), node("n3", "b", 8)}
	db := pod("db", 0, "1")
	db.Labels["app"] = "db"
	db.Spec.NodeName = "n1"
	db.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		antiTerm("topology.kubernetes.io/zone", map[string]string{"app": "noisy"})}}}
	c := NewCluster(nodes, []*corev1.Pod{db}, Options{})
	noisy := pod("noisy", 0, "1")
	noisy.Labels["app"] = "noisy"
	rules, _ := c.rules(noisy)
	if len(rules) != 1 || rules[0].why != existingAntiWhy || rules[0].req.Key != "topology.kubernetes.io/zone" ||
		rules[0].req.Operator != wire.SelectorOperatorNotIn || strings.Join(rules[0].req.Values, ",") != "zone-a" {
		t.Errorf("the symmetric rule: %+v", rules)
	}
	web := pod("web", 0, "1")
	web.Labels["app"] = "web"
	web.Spec.Affinity = &corev1.Affinity{
		PodAffinity:     &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{antiTerm(HostnameKey, map[string]string{"app": "db"})}},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{antiTerm("topology.kubernetes.io/zone", map[string]string{"app": "db"})}},
	}
	rules, _ = c.rules(web)
	var aff, anti *wire.SelectorRequirementT
	for _, ru := range rules {
		switch ru.why {
		case affinityWhy:
			aff = ru.req
		case antiWhy:
			anti = ru.req
		}
	}
	if aff == nil || aff.Operator != wire.SelectorOperatorIn || strings.Join(aff.Values, ",") != "n1" ||
		anti == nil || strings.Join(anti.Values, ",") != "zone-a" {
		t.Errorf("affinity %+v, anti-affinity %+v", aff, anti)
	}
	// The first of a series: no pod matches; it matches its own term.
	first := pod("first", 0, "1")
	first.Labels["app"] = "cache"
	first.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		antiTerm("topology.kubernetes.io/zone", map[string]string{"app": "cache"})}}}
	rules, _ = c.rules(first)
	if len(rules) != 1 || rules[0].req.Operator != wire.SelectorOperatorExists {
		t.Errorf("the first of a series: %+v", rules)
	}
	first.Labels["app"] = "other"
	rules, _ = c.rules(first)
	if len(rules) != 1 || rules[0].req.Operator != wire.SelectorOperatorIn || rules[0].req.Values[0] != none {
		t.Errorf("affinity no pod can satisfy: %+v", rules)
	}
	// Namespaces: a term reads the pod's own namespace unless it names others.
	other := db.DeepCopy()
	other.Namespace = "elsewhere"
	other.UID = "other"
	c = NewCluster(nodes, []*corev1.Pod{other}, Options{})
	if rules, _ = c.rules(web); len(rules) != 1 || rules[0].req.Values[0] != none {
		t.Errorf("a pod of another namespace satisfied the affinity: %+v", rules)
	}
	web.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].NamespaceSelector = &metav1.LabelSelector{}
	if rules, _ = c.rules(web); len(rules) < 1 || strings.Join(rules[0].req.Values, ",") != "n1" {
		t.Errorf("namespaceSelector {} (all namespaces): %+v", rules)
	}
}

// DoNotSchedule spread: the domains where one more would pass maxSkew are
// excluded; nodes without the key too; ScheduleAnyway is a preference.
func TestSpreadRules(t *testing.T) {
	nodes := []*corev1.Node{node("n1", "a", 8), node("n2", "a", 8), node("n3", "b", 8)}
	var bound []*corev1.Pod
	for i, n := range []string{"n1", "n2"} {
		b := pod("b"+string(rune('0'+i)), 0, "1")
		b.Labels["app"] = "web"
		b.Spec.NodeName = n
		bound = append(bound, b)
	}
	c := NewCluster(nodes, bound, Options{})
	p := pod("p", 0, "1")
	p.Labels["app"] = "web"
	sc := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{sc}
	rules, prefs := c.rules(p)
	if len(rules) != 2 || rules[0].why != spreadLabelWhy || rules[1].why != spreadWhy || strings.Join(rules[1].req.Values, ",") != "zone-a" ||
		rules[1].req.Operator != wire.SelectorOperatorNotIn || len(prefs) != 0 {
		t.Errorf("spread rules %+v, preferences %+v", rules, prefs)
	}
	sc.MaxSkew = 3
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{sc}
	if rules, _ = c.rules(p); len(rules) != 1 {
		t.Errorf("maxSkew 3 excludes: %+v", rules)
	}
	sc.WhenUnsatisfiable = corev1.ScheduleAnyway
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{sc}
	rules, prefs = c.rules(p)
	if len(rules) != 0 || len(prefs) != 1 || prefs[0].Weight != 50 || prefs[0].Preference.MatchExpressions[0].Values[0] != "zone-b" {
		t.Errorf("ScheduleAnyway: rules %+v preferences %+v", rules, prefs)
	}
}

// Which pods of one cycle constrain each other.
func TestInteract(t *testing.T) {
	mk := func(name, app string) *corev1.Pod {
		p := pod(name, 0, "1")
		p.Labels["app"] = app
		return p
	}
	a, b, other := mk("a", "web"), mk("b", "web"), mk("c", "db")
	for _, p := range []*corev1.Pod{a, b} {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			antiTerm(HostnameKey, map[string]string{"app": "web"})}}}
	}
	if d, o := Interact(a, b, nil); !d || o {
		t.Errorf("hostname anti-affinity: distinct %v other %v", d, o)
	}
	if d, o := Interact(a, other, nil); d || o {
		t.Errorf("unrelated pods interact: %v %v", d, o)
	}
	a.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey = "topology.kubernetes.io/zone"
	if _, o := Interact(b, a, nil); !o {
		t.Errorf("zone anti-affinity is not another interaction")
	}
	other.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: HostnameKey, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if _, o := Interact(b, other, nil); !o {
		t.Errorf("a spread selecting the other pod")
	}
	if !HasRules(other) || HasRules(mk("x", "y")) {
		t.Errorf("HasRules")
	}
	if k := RuleKeys([]*corev1.Pod{a, other}); !k["app"] || len(k) != 1 {
		t.Errorf("rule keys %v", k)
	}
}

// Placer's explanation in kube-scheduler's words: the nodes only a pod
// rule excludes are given back to that rule; taints are {key: value}.
func TestExplainInKubeSchedulersWords(t *testing.T) {
	nodes := []*corev1.Node{node("n1", "a", 8), node("n2", "a", 8), node("n3", "b", 8), node("n4", "b", 8)}
	nodes[3].Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "infer", Effect: corev1.TaintEffectNoSchedule}}
	var bound []*corev1.Pod
	for _, n := range []string{"n1", "n3"} {
		b := pod("web-"+n, 0, "1")
		b.Labels["app"] = "web"
		b.Spec.NodeName = n
		bound = append(bound, b)
	}
	p := pod("p", 8, "1")
	p.Labels["app"] = "web"
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		antiTerm(HostnameKey, map[string]string{"app": "web"})}}}
	r := build(nodes, bound, []*corev1.Pod{p}, Options{})
	// As Placer counts them: the hostname rule is node affinity to it; n2 has no GPUs left.
	r.C.Wire[1].GpuFreeMilli = []uint16{0, 0, 0, 0, 0, 0, 0, 0}
	u := &wire.UnplacedT{Reason: wire.UnplacedReasonInsufficientCapacity, Nodes: 4, Excluded: []*wire.ExclusionCountT{
		{Reason: wire.NodeExclusionAffinity, Nodes: 3}, {Reason: wire.NodeExclusionGpus, Nodes: 1}}}
	want := "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {dedicated: infer}, 2 node(s) didn't match pod anti-affinity rules."
	// n4: Placer saw affinity first (its rule passes there: no web pod), so it is the taint; n2 its GPUs.
	u.Excluded = []*wire.ExclusionCountT{{Reason: wire.NodeExclusionAffinity, Nodes: 2}, {Reason: wire.NodeExclusionGpus, Nodes: 1},
		{Reason: wire.NodeExclusionTaint, Nodes: 1, Detail: "dedicated=infer:NoSchedule"}}
	if m := r.Explain(0, u); m != want {
		t.Errorf("message\n %q, want\n %q", m, want)
	}
	if m := r.Explain(0, &wire.UnplacedT{Reason: wire.UnplacedReasonQuotaExceeded, Detail: "queue q full"}); m != "QuotaExceeded: queue q full" {
		t.Errorf("message %q", m)
	}
	never := &wire.UnplacedT{Reason: wire.UnplacedReasonGangIncomplete, Never: true, Nodes: 64, ReplicasRequired: 65, ReplicasFitEmpty: 64, ReplicasFit: 3,
		Excluded: []*wire.ExclusionCountT{{Reason: wire.NodeExclusionGpus, Nodes: 64}}}
	if m := r.Explain(-1, never); m != "It can never run on this cluster as it is: it needs 65 replicas at once, and the nodes that admit it could hold at most 64 even empty. "+
		"0/64 nodes are available: 64 Insufficient nvidia.com/gpu. Resources were found for 3 replica(s) while 65 are required." {
		t.Errorf("message %q", m)
	}
	cordoned := &wire.UnplacedT{Reason: wire.UnplacedReasonNoFeasibleNode, Nodes: 2, Excluded: []*wire.ExclusionCountT{
		{Reason: wire.NodeExclusionTaint, Nodes: 2, Detail: corev1.TaintNodeUnschedulable + ":NoSchedule"}}}
	if m := r.Explain(-1, cordoned); m != "0/2 nodes are available: 2 node(s) were unschedulable." {
		t.Errorf("message %q", m)
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
	p.Spec.Priority = ptr(int32(1000))
	p.Labels[QueueLabel] = "team-a"
	r := build([]*corev1.Node{node("n1", "r1", 8)}, nil, []*corev1.Pod{p}, Options{})
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
	// A DaemonSet's pod: matchFields on metadata.name, as the round's node label.
	ds := pod("ds", 1, "1")
	ds.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}}
	bad := ds.DeepCopy()
	bad.Name = "bad"
	bad.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Key = "spec.unschedulable"
	r = build([]*corev1.Node{node("n1", "r1", 8)}, nil, []*corev1.Pod{bad, ds}, Options{})
	if len(r.Request.Pending) != 1 || len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Why, "matchFields spec.unschedulable") {
		t.Fatalf("skipped %+v", r.Skipped)
	}
	if e := r.Request.Pending[0].Constraints.Required[0].MatchExpressions[0]; e.Key != NodeLabel || e.Values[0] != "n1" {
		t.Errorf("matchFields: %+v", e)
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
	r := build([]*corev1.Node{node("n1", "r1", 4)}, bound, []*corev1.Pod{share("new", "", "400", "")}, Options{})
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
	r = build([]*corev1.Node{node("n1", "r1", 4)}, nil, []*corev1.Pod{bad, both}, Options{})
	if len(r.Skipped) != 2 || !strings.Contains(r.Skipped[0].Why, "1..999") || !strings.Contains(r.Skipped[1].Why, "asks no whole GPUs") {
		t.Errorf("skipped %+v", r.Skipped)
	}
}

// A unit of a gang is one gang job; distinct nodes; its rack required, or preferred.
func TestUnitsAreJobs(t *testing.T) {
	a, b := pod("a", 8, "4"), pod("b", 8, "4")
	nodes := []*corev1.Node{node("n1", "r1", 8), node("n2", "r2", 8)}
	c := NewCluster(nodes, nil, Options{TopologyLabels: []string{"placer.io/rack"}})
	r := Build(c, []*Unit{{Key: "g", Pods: []*corev1.Pod{a, b}, Gang: true, Local: true, DistinctNodes: true, Domain: Domain{"r2"}}}, 1)
	j := r.Request.Pending[0]
	if !j.Gang || !j.DistinctNodes || j.Replicas != 2 || j.TopologyLevel != 1 || j.TopologyMode != wire.TopologyModePreferred ||
		len(j.Constraints.Preferred) != 1 || j.Constraints.Preferred[0].Preference.MatchExpressions[0].Values[0] != "r2" {
		t.Errorf("job %+v %+v", j, j.Constraints)
	}
	r = Build(c, []*Unit{{Key: "g", Pods: []*corev1.Pod{a, b}, Gang: true, Within: "placer.io/rack", Domain: Domain{"r2"}}}, 1)
	j = r.Request.Pending[0]
	if j.TopologyMode != wire.TopologyModeRequired || len(j.Constraints.Required) != 1 || j.Constraints.Required[0].MatchExpressions[0].Values[0] != "r2" {
		t.Errorf("required rack: %+v", j.Constraints)
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
	r := build(nodes, []*corev1.Pod{low3, same, term, ds, refused, g1, g2}, []*corev1.Pod{pending}, opt)
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
	r = build(nodes, []*corev1.Pod{low3}, []*corev1.Pod{pending}, Options{})
	if len(r.Request.Running) != 0 || r.Request.Policy.Queue != nil {
		t.Errorf("without Evict: %d running jobs, queue policy %+v", len(r.Request.Running), r.Request.Policy.Queue)
	}
}

// Requests the API server takes but no node can hold: cpu 1e16 (whose
// MilliValue wraps to 0), cpu 92233720368547758 and memory 8Ei (to below
// 0). Each pod is unschedulable in kube-scheduler's words, not a job of no
// CPU that any node would take, nor one that Placer refuses with the round.
func TestRequestsPastEveryNodeAreUnschedulable(t *testing.T) {
	huge := func(name string, rl corev1.ResourceList) *corev1.Pod {
		p := pod(name, 0, "1")
		for k, v := range rl {
			p.Spec.Containers[0].Resources.Requests[k] = v
		}
		return p
	}
	pending := []*corev1.Pod{
		huge("cpu-1e16", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1e16")}),
		huge("cpu-wraps", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("92233720368547758")}),
		huge("mem-8ei", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Ei")}),
		huge("both", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1e18"), corev1.ResourceMemory: resource.MustParse("1e30")}),
		huge("gpus", corev1.ResourceList{GPUResource: resource.MustParse("1e20")}),
		pod("fine", 1, "2"),
	}
	r := build([]*corev1.Node{node("n1", "r1", 8), node("n2", "r1", 8)}, nil, pending, Options{})
	if len(r.Request.Pending) != 1 || r.Request.Pending[0].Name != "pod/ns/fine" {
		t.Fatalf("jobs: %d, want the fine pod's alone", len(r.Request.Pending))
	}
	want := map[string]string{
		"pod/ns/cpu-1e16":  "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu.",
		"pod/ns/cpu-wraps": "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu.",
		"pod/ns/mem-8ei":   "Unschedulable: 0/2 nodes are available: 2 Insufficient memory.",
		"pod/ns/both":      "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory.",
		"pod/ns/gpus":      "SchedulerError: cannot express: 100e18 GPUs per pod (at most 64)",
	}
	for _, s := range r.Skipped {
		if got := s.Reason + ": " + s.Why; got != want[s.Unit.Key] {
			t.Errorf("%s: %q, want %q", s.Unit.Key, got, want[s.Unit.Key])
		}
		delete(want, s.Unit.Key)
	}
	if len(want) > 0 {
		t.Errorf("not skipped: %v", want)
	}
	// A bound pod of such requests fills its node rather than emptying it.
	b := huge("bound", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1e16")})
	b.Spec.NodeName = "n1"
	r = build([]*corev1.Node{node("n1", "r1", 8)}, []*corev1.Pod{b}, nil, Options{})
	if n := r.Request.Cluster.Nodes[0]; n.CpuMilliFree != 0 {
		t.Errorf("n1 with a bound pod of 1e16 CPUs: %d mCPU free", n.CpuMilliFree)
	}
	// A node that says it has more than Placer takes has that much.
	vast := node("vast", "r1", 8)
	vast.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1e16")
	vast.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("8Ei")
	r = build([]*corev1.Node{vast}, nil, []*corev1.Pod{pod("fine", 1, "2")}, Options{})
	if n := r.Request.Cluster.Nodes[0]; n.CpuMilliCapacity != 1<<40 || n.MemoryMibCapacity != 1<<40 ||
		n.CpuMilliFree != 1<<40 || n.MemoryMibFree != 1<<40 {
		t.Errorf("a node of 1e16 CPUs and 8Ei: %+v", n)
	}
	// Below that, as much as it says: 2Pi is 2^31 MiB, not more.
	vast.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("2Pi")
	r = build([]*corev1.Node{vast}, nil, nil, Options{})
	if n := r.Request.Cluster.Nodes[0]; n.MemoryMibCapacity != 1<<31 {
		t.Errorf("a node of 2Pi: %d MiB", n.MemoryMibCapacity)
	}
}

// A node of more GPUs than Placer takes on one (a device plugin's
// time-slicing: 8 GPUs of 10 replicas are 80) would have Placer refuse
// every round: its GPUs are left out, its CPU and memory kept, and its pods
// are no victims.
func TestANodePastPlacersGPUsKeepsItsCPUAndNoVictims(t *testing.T) {
	prio := func(p *corev1.Pod, v int32) *corev1.Pod { p.Spec.Priority = &v; return p }
	low := prio(pod("low", 2, "4"), 1)
	low.Spec.NodeName = "big"
	nodes := []*corev1.Node{node("big", "r1", 80), node("n1", "r1", 8)}
	r := build(nodes, []*corev1.Pod{low}, []*corev1.Pod{prio(pod("urgent", 8, "8"), 100), pod("cpu", 0, "2")},
		Options{Evict: true})
	big := r.Request.Cluster.Nodes[0]
	if big.Name != "big" || len(big.GpuFreeMilli) != 0 || big.CpuMilliCapacity != 96000 || big.CpuMilliFree != 92000 {
		t.Errorf("big: %d GPUs, %d of %d mCPU free; want none, 92000 of 96000", len(big.GpuFreeMilli), big.CpuMilliFree,
			big.CpuMilliCapacity)
	}
	if n1 := r.Request.Cluster.Nodes[1]; len(n1.GpuFreeMilli) != 8 {
		t.Errorf("n1: %d GPUs", len(n1.GpuFreeMilli))
	}
	if got := r.C.GPUsLeftOut; len(got) != 1 || got[0] != "big" {
		t.Errorf("GPUs left out: %v", got)
	}
	if len(r.Request.Running) != 0 {
		t.Errorf("a pod on a node whose GPUs are left out is a victim: %v", r.Request.Running[0].Name)
	}
	if len(r.Request.Pending) != 2 {
		t.Errorf("jobs: %d, want 2", len(r.Request.Pending))
	}
	// A count no node has is left out the same way, without a list that long.
	vast := node("vast", "r1", 0)
	vast.Status.Allocatable[GPUResource] = resource.MustParse("1e15")
	r = build([]*corev1.Node{vast}, nil, nil, Options{})
	if n := r.Request.Cluster.Nodes[0]; len(n.GpuFreeMilli) != 0 || len(r.C.GPUsLeftOut) != 1 {
		t.Errorf("a node of 1e15 GPUs: %d GPUs, left out %v", len(n.GpuFreeMilli), r.C.GPUsLeftOut)
	}
}
