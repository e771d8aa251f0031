package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Pods that run and finish (the tests' node-lifecycle loop, kubelet.go):
// 160 pods of 1 to 8 GPUs and four gangs of three 8-GPU pods, each running
// about a second, queued at once on 8 nodes of 8 GPUs (about seven times
// what fits at a time), are all bound as the earlier ones finish and make
// room; none is bound twice or lost, no node is ever over its allocatable;
// a node lost midway fails its pods and gets no new one; the gangs'
// PodGroups end Finished (or Failed, for a gang the lost node held).
func TestChurnPodsRunAndFinish(t *testing.T) {
	c := newCluster(t, 8, 0)
	c.podGroupCRD()
	ns := "churn"
	c.create(ns)
	const gangs, lone = 4, 160
	for g := 0; g < gangs; g++ {
		c.podGroup(ns, fmt.Sprintf("job-%d", g), map[string]any{"minMember": 3})
	}
	k := c.startKubelet(ns)
	url := c.startSchedulerMetrics()
	var pods []*corev1.Pod
	for i := 0; i < lone; i++ {
		p := c.buildPod(ns, podSpec{name: fmt.Sprintf("p-%03d", i), gpus: []int64{1, 2, 4, 8}[i%4]})
		p.Annotations = map[string]string{RunFor: fmt.Sprintf("%dms", 600+(i%5)*200)}
		pods = append(pods, p)
	}
	for g := 0; g < gangs; g++ {
		for m := 0; m < 3; m++ {
			p := c.buildPod(ns, podSpec{name: fmt.Sprintf("job-%d-%d", g, m), group: fmt.Sprintf("job-%d", g), gpus: 8})
			p.Annotations = map[string]string{RunFor: "1500ms"}
			pods = append(pods, p)
		}
	}
	start := time.Now()
	c.create(ns, pods...)
	total := len(pods)
	var lostAt time.Time
	lostCycle := 0.0
	onLost := map[string]bool{}
	looks := 0
	deadline := time.Now().Add(8 * time.Minute)
	for {
		ps := c.pods(ns)
		phase := map[corev1.PodPhase]int{}
		for _, p := range ps {
			phase[p.Status.Phase]++
		}
		c.checkCapacity()
		looks++
		if lostAt.IsZero() && phase[corev1.PodSucceeded] >= total/4 {
			for _, p := range ps {
				if p.Spec.NodeName == "node-8" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					onLost[p.Name] = true
				}
			}
			lostAt = time.Now()
			lostCycle = metric(scrape(url), "placer_k8s_scheduling_cycles_total")
			k.lose("node-8")
			t.Logf("node-8 lost at %.1f s with %d of our pods on it; %v", time.Since(start).Seconds(), len(onLost), phase)
		}
		if phase[corev1.PodSucceeded]+phase[corev1.PodFailed] == total {
			t.Logf("all %d pods finished in %.1f s (%d succeeded, %d failed), %d looks", total, time.Since(start).Seconds(),
				phase[corev1.PodSucceeded], phase[corev1.PodFailed], looks)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v of %d pods", time.Since(start), phase, total)
		}
		if t.Failed() {
			t.FailNow()
		}
		time.Sleep(500 * time.Millisecond)
	}
	// None lost: each failed pod is one the lost node held, or one a cycle
	// already under way when it went (or the next, whose view of the nodes
	// may predate it) bound there; no later cycle bound any there.
	cycles := c.recordedCycles()
	for _, p := range c.pods(ns) {
		late := float64(cycles[ns+"/"+p.Name]) > lostCycle+1
		switch {
		case p.Status.Phase == corev1.PodFailed && !onLost[p.Name] && (p.Spec.NodeName != "node-8" || late):
			t.Errorf("%s failed on %s (%s), bound in cycle %d, not held by the lost node (lost in cycle %v)", p.Name, p.Spec.NodeName,
				p.Status.Message, cycles[ns+"/"+p.Name], lostCycle)
		case p.Spec.NodeName == "node-8" && late:
			t.Errorf("%s bound to the lost node-8 in cycle %d, it was lost in cycle %v (at %v)", p.Name, cycles[ns+"/"+p.Name], lostCycle, lostAt)
		}
	}
	// Bound once each: the scheduler recorded each pod once, the API server
	// refused no Binding, and the loop never saw a pod start twice.
	b, _ := os.ReadFile(c.record)
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		seen[strings.Fields(line)[0]]++
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s recorded %d times", name, n)
		}
	}
	if len(seen) != total {
		t.Errorf("%d pods recorded, want %d", len(seen), total)
	}
	page := scrape(url)
	if e, n := metric(page, "placer_k8s_bind_errors_total"), metric(page, "placer_k8s_pods_bound_total"); e != 0 || n != float64(total) {
		t.Errorf("%v bindings refused, %v bound, want 0 and %d", e, n, total)
	}
	if p := k.problems(); len(p) > 0 {
		t.Errorf("the node-lifecycle loop: %v", p)
	}
	// The gangs' PodGroups: Finished, with their three pods succeeded (a
	// gang the lost node held: Failed).
	waitFor(t, 30*time.Second, "the PodGroups' final phases", func() (bool, string) {
		var got []string
		ok := true
		for g := 0; g < gangs; g++ {
			name := fmt.Sprintf("job-%d", g)
			s := c.podGroupStatus(ns, name)
			want := "Finished 3"
			for m := 0; m < 3; m++ {
				if onLost[fmt.Sprintf("%s-%d", name, m)] {
					want = "Failed"
				}
			}
			have := fmt.Sprintf("%v %v", s["phase"], s["succeeded"])
			if !strings.HasPrefix(have, want) {
				ok = false
			}
			got = append(got, name+": "+have+" (want "+want+")")
		}
		sort.Strings(got)
		return ok, strings.Join(got, ", ")
	})
	if n := metric(page, "placer_k8s_pod_scheduling_seconds_count"); n != float64(total) {
		t.Errorf("%v scheduling latencies observed, want %d", n, total)
	}
}

// Back-off does not let a lower priority take a higher one's room: a
// high-priority pod waits (backing off, longer each time) for a node a
// running pod holds; a low-priority pod asks for it too, later. When the
// running pod finishes, the high-priority one gets the node.
func TestBackoffKeepsPriority(t *testing.T) {
	c := newCluster(t, 4, 0)
	c.priorityClass("high", 1000)
	ns := "prio-backoff"
	c.create(ns)
	c.startKubelet(ns)
	c.startScheduler()
	host := map[string]string{"kubernetes.io/hostname": "node-1"}
	running := c.buildPod(ns, podSpec{name: "running", gpus: 8, selector: host})
	running.Annotations = map[string]string{RunFor: "8s"}
	c.create(ns, running)
	waitFor(t, 60*time.Second, "the first pod running", func() (bool, string) {
		p := c.get(ns, "running")
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	c.createPods(ns, podSpec{name: "high", gpus: 8, selector: host, priority: "high"})
	c.waitCondition(ns, "high", "Unschedulable", "1 Insufficient nvidia.com/gpu", 30*time.Second)
	time.Sleep(4 * time.Second) // high backs off longer each time
	c.createPods(ns, podSpec{name: "low", gpus: 8, selector: host})
	c.waitCondition(ns, "low", "Unschedulable", "1 Insufficient nvidia.com/gpu", 30*time.Second)
	waitFor(t, 90*time.Second, "a pod bound after the first finished", func() (bool, string) {
		h, l := c.get(ns, "high"), c.get(ns, "low")
		return h.Spec.NodeName != "" || l.Spec.NodeName != "", fmt.Sprintf("high on %q, low on %q", h.Spec.NodeName, l.Spec.NodeName)
	})
	if h, l := c.get(ns, "high"), c.get(ns, "low"); h.Spec.NodeName != "node-1" || l.Spec.NodeName != "" {
		t.Errorf("high on %q, low on %q: the low-priority pod took the room", h.Spec.NodeName, l.Spec.NodeName)
	}
}
