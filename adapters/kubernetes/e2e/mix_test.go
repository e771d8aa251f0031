package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// The review's second mix, as a test: 2,100 pods that can never run
// queued first, then pods of every kind (gangs, one of different sizes,
// one with minMember below its size; selectors; taints; priorities; zone
// anti-affinity; pod affinity; spread; gates; sidecars; a claim not bound;
// unfit pods) on 16 nodes of 8 GPUs, more than they hold. Checked
// independently of the scheduler's code, with kube-scheduler's own
// helpers (component-helpers): no bound pod breaks its node's capacity,
// selectors, affinity, taints, pod affinity, anti-affinity (either way) or
// spread; no gated or claim-waiting pod is bound; each gang is bound with
// at least its minMember or not at all; every pod not bound says why; and
// no pod waits whose room a pod of a lower priority took.
func TestReviewMixBehindABacklog(t *testing.T) {
	c := newCluster(t, 16, 2) // node-1..8 zone-1, node-9..16 zone-2; node-15, 16 tainted dedicated=infer
	c.podGroupCRD()
	c.priorityClass("urgent", 1000)
	c.priorityClass("filler", -10)
	ns := "mix"
	c.create(ns)
	c.podGroup(ns, "wide", map[string]any{"minMember": 2})
	url := c.startSchedulerMetrics()
	const backlog = 2100
	c.createBacklog(ns, backlog)
	c.waitBacklogTried(url, backlog)
	// The rest arrive together while the scheduler is away (one round takes
	// them all, by priority), as a burst would.
	c.stopScheduler(syscall.SIGTERM)
	with := func(p *corev1.Pod, f func(*corev1.Pod)) *corev1.Pod { f(p); return p }
	app := func(name string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Labels["app"] = name } }
	var pods []*corev1.Pod
	for i := 0; i < 4; i++ {
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("train-%d", i), group: "train", gpus: 8, minMember: 4}))
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("wide-%d", i), group: "wide", gpus: 8}))
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("h100-%d", i), gpus: 4, selector: map[string]string{"nvidia.com/gpu.product": h100}}))
	}
	pods = append(pods, c.buildPod(ns, podSpec{name: "mpi-launcher", group: "mpi", cpu: "2", minMember: 4}))
	for i := 0; i < 3; i++ {
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("mpi-worker-%d", i), group: "mpi", gpus: 8, minMember: 4}))
	}
	for i := 0; i < 2; i++ {
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("infer-%d", i), gpus: 8, tolerate: true, hosts: []string{"node-15", "node-16"}}))
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("urgent-%d", i), gpus: 8, priority: "urgent"}))
	}
	pods = append(pods, c.buildPod(ns, podSpec{name: "intolerant", gpus: 1, hosts: []string{"node-15", "node-16"}}))
	for i := 0; i < 5; i++ {
		pods = append(pods, with(c.buildPod(ns, podSpec{name: fmt.Sprintf("db-%d", i), gpus: 1}), func(p *corev1.Pod) {
			p.Labels["app"] = "db"
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: "topology.kubernetes.io/zone", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}}}
		}))
		pods = append(pods, with(c.buildPod(ns, podSpec{name: fmt.Sprintf("web-%d", i), gpus: 1}), func(p *corev1.Pod) {
			p.Labels["app"] = "web"
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-web", Controller: ptrTo(true)}}
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}},
				NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: hosts(1, 3)}}}}}}}
		}))
	}
	pods = append(pods, with(c.buildPod(ns, podSpec{name: "cache", gpus: 2}), app("cache")))
	pods = append(pods, with(c.buildPod(ns, podSpec{name: "frontend", gpus: 1}), func(p *corev1.Pod) {
		p.Labels["app"] = "frontend"
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}}}}}
	}))
	for i := 0; i < 6; i++ {
		pods = append(pods, with(c.buildPod(ns, podSpec{name: fmt.Sprintf("spread-%d", i), gpus: 1}), func(p *corev1.Pod) {
			p.Labels["app"] = "spread"
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		}))
	}
	for i := 0; i < 2; i++ {
		pods = append(pods, with(c.buildPod(ns, podSpec{name: fmt.Sprintf("gated-%d", i), gpus: 1}), func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
		}))
	}
	always := corev1.ContainerRestartPolicyAlways
	for i := 0; i < 3; i++ {
		pods = append(pods, with(c.buildPod(ns, podSpec{name: fmt.Sprintf("sidecar-%d", i), cpu: "40", selector: map[string]string{"kubernetes.io/hostname": "node-1"}}),
			func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "none", RestartPolicy: &always, Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10")}}}}
			}))
	}
	pods = append(pods, with(c.buildPod(ns, podSpec{name: "claim", gpus: 1}), func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "nowhere"}}}}
	}))
	pods = append(pods, c.buildPod(ns, podSpec{name: "too-big", gpus: 16}), c.buildPod(ns, podSpec{name: "too-wide", gpus: 1, cpu: "200"}))
	for i := 0; i < 24; i++ {
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("filler-%02d", i), gpus: 2, priority: "filler"}))
	}
	c.create(ns, pods...)
	url = c.startSchedulerMetrics()
	// Settled: every pod of the mix bound, or told why (gated ones alone left as they are).
	waitFor(t, 240*time.Second, "every pod of the mix bound or told why", func() (bool, string) {
		var left []string
		for _, p := range c.pods(ns) {
			if strings.HasPrefix(p.Name, "never-") || len(p.Spec.SchedulingGates) > 0 || p.Spec.NodeName != "" {
				continue
			}
			if cd := condition(&p); cd == nil || cd.Status != corev1.ConditionFalse || cd.Message == "" {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
	time.Sleep(3 * time.Second) // the last cycle's bindings land
	all := c.pods(ns)
	c.verifyMix(all)
	c.checkCapacity()
	if e := metric(scrape(url), "placer_k8s_bind_errors_total"); e != 0 {
		t.Errorf("%v Bindings refused", e)
	}
	bound := 0
	for _, p := range all {
		if p.Spec.NodeName != "" {
			bound++
		} else if !strings.HasPrefix(p.Name, "never-") {
			if cd := condition(&p); cd != nil {
				t.Logf("%s: %s", p.Name, cd.Message)
			}
		}
	}
	t.Logf("%d pods bound of %d", bound, len(all))
}

// verifyMix checks the bound pods with kube-scheduler's helpers.
func (c *cluster) verifyMix(all []corev1.Pod) {
	t := c.t
	nl, err := c.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*corev1.Node{}
	for i := range nl.Items {
		nodes[nl.Items[i].Name] = &nl.Items[i]
	}
	var bound []*corev1.Pod
	for i := range all {
		if all[i].Spec.NodeName != "" {
			bound = append(bound, &all[i])
		}
	}
	domain := func(p *corev1.Pod, key string) (string, bool) {
		v, ok := nodes[p.Spec.NodeName].Labels[key]
		return v, ok
	}
	matches := func(term corev1.PodAffinityTerm, owner, q *corev1.Pod) bool {
		sel, _ := metav1.LabelSelectorAsSelector(term.LabelSelector)
		ns := term.Namespaces
		if len(ns) == 0 && term.NamespaceSelector == nil {
			ns = []string{owner.Namespace}
		}
		in := false
		for _, n := range ns {
			in = in || n == q.Namespace
		}
		return in && sel.Matches(labels.Set(q.Labels))
	}
	groups := map[string][2]int{}
	for _, p := range bound {
		n := nodes[p.Spec.NodeName]
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); !ok {
			t.Errorf("%s on %s: its node affinity or selector does not match", p.Name, n.Name)
		}
		if taint, bad := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, p.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false); bad {
			t.Errorf("%s on %s: untolerated taint %v", p.Name, n.Name, taint)
		}
		if len(p.Spec.SchedulingGates) > 0 {
			t.Errorf("%s bound with scheduling gates", p.Name)
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				t.Errorf("%s bound with its claim %s unbound", p.Name, v.PersistentVolumeClaim.ClaimName)
			}
		}
		if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
			for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				d, ok := domain(p, term.TopologyKey)
				for _, q := range bound {
					if q == p || !ok || !matches(term, p, q) {
						continue
					}
					if e, _ := domain(q, term.TopologyKey); e == d {
						t.Errorf("%s on %s and %s on %s share %s=%s against %s's anti-affinity", p.Name, p.Spec.NodeName, q.Name, q.Spec.NodeName, term.TopologyKey, d, p.Name)
					}
				}
			}
		}
		if a := p.Spec.Affinity; a != nil && a.PodAffinity != nil {
			for _, term := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				d, _ := domain(p, term.TopologyKey)
				found := matches(term, p, p) // the first of a series
				for _, q := range bound {
					if e, _ := domain(q, term.TopologyKey); q != p && matches(term, p, q) && e == d {
						found = true
					}
				}
				if !found {
					t.Errorf("%s on %s: no pod its affinity needs in %s=%s", p.Name, p.Spec.NodeName, term.TopologyKey, d)
				}
			}
		}
		if k := p.Labels["scheduling.x-k8s.io/pod-group"]; k != "" {
			g := groups[k]
			g[0]++
			groups[k] = g
		}
	}
	// Spread: the final counts per zone within maxSkew.
	for _, p := range bound {
		for _, sc := range p.Spec.TopologySpreadConstraints {
			sel, _ := metav1.LabelSelectorAsSelector(sc.LabelSelector)
			per := map[string]int{}
			for _, n := range nodes {
				if v, ok := n.Labels[sc.TopologyKey]; ok {
					per[v] += 0
				}
			}
			for _, q := range bound {
				if q.Namespace == p.Namespace && sel.Matches(labels.Set(q.Labels)) {
					v, _ := domain(q, sc.TopologyKey)
					per[v]++
				}
			}
			lo, hi := -1, 0
			for _, n := range per {
				if lo < 0 || n < lo {
					lo = n
				}
				hi = max(hi, n)
			}
			if int32(hi-lo) > sc.MaxSkew {
				t.Errorf("spread of %s over %s: %v, skew past %d", p.Name, sc.TopologyKey, per, sc.MaxSkew)
			}
		}
	}
	// Gangs: minMember or none.
	for _, p := range all {
		if k := p.Labels["scheduling.x-k8s.io/pod-group"]; k != "" {
			g := groups[k]
			g[1]++
			groups[k] = g
		}
	}
	for k, g := range groups {
		min := g[1]
		if k == "wide" {
			min = 2
		}
		if g[0] > 0 && g[0] < min {
			c.t.Errorf("gang %s: %d of %d bound, under its minMember %d", k, g[0], g[1], min)
		}
	}
	// Priority: no pod waits whose room pods of a lower priority took on a
	// node that admits it (their GPUs, CPU and memory would have held it).
	prio := func(p *corev1.Pod) int32 {
		if p.Spec.Priority != nil {
			return *p.Spec.Priority
		}
		return 0
	}
	for i := range all {
		h := &all[i]
		if h.Spec.NodeName != "" || len(h.Spec.SchedulingGates) > 0 || strings.HasPrefix(h.Name, "never-") || len(h.Spec.Volumes) > 0 ||
			h.Labels["scheduling.x-k8s.io/pod-group"] != "" || (h.Spec.Affinity != nil && (h.Spec.Affinity.PodAntiAffinity != nil || h.Spec.Affinity.PodAffinity != nil)) ||
			len(h.Spec.TopologySpreadConstraints) > 0 {
			continue
		}
		want := resourcehelper.PodRequests(h, kubeRequests)
		for _, n := range nodes {
			if ok, _ := nodeaffinity.GetRequiredNodeAffinity(h).Match(n); !ok {
				continue
			}
			if _, bad := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, h.Spec.Tolerations, func(t *corev1.Taint) bool {
				return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
			}, false); bad {
				continue
			}
			free := n.Status.Allocatable.DeepCopy()
			var lower []string
			for _, q := range bound {
				if q.Spec.NodeName != n.Name {
					continue
				}
				if prio(q) < prio(h) {
					lower = append(lower, q.Name)
					continue // its room would be h's
				}
				for r, v := range resourcehelper.PodRequests(q, kubeRequests) {
					x := free[r]
					x.Sub(v)
					free[r] = x
				}
			}
			fits := len(lower) > 0
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, "nvidia.com/gpu"} {
				w, f := want[r], free[r]
				if w.Cmp(f) > 0 {
					fits = false
				}
			}
			if fits {
				c.t.Errorf("%s (priority %d) waits while %v, of a lower priority, hold %s, where it fits without them", h.Name, prio(h), lower, n.Name)
			}
		}
	}
}
