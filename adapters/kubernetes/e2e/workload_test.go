package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The native Workload API (scheduling.k8s.io/v1beta1, served by
// scripts/k8s-cluster.sh with its feature gate GenericWorkload and its
// group version on): a Workload with a gang template of minCount 3, its
// PodGroup (its topology constraint on the rack label: one rack
// required), and pods naming it in spec.schedulingGroup. Two pods wait,
// saying so, unbound; the third makes the gang, bound whole in one rack. A
// pod naming a PodGroup that does not exist waits for it; the pods of a
// PodGroup with the basic policy are placed one by one.
func TestNativeWorkloadGang(t *testing.T) {
	c := newCluster(t, 8, 0)
	ctx := context.Background()
	ns := "wl"
	c.createPods(ns) // the namespace
	sched := c.cs.SchedulingV1beta1()
	w := &schedulingv1beta1.Workload{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns},
		Spec: schedulingv1beta1.WorkloadSpec{PodGroupTemplates: []schedulingv1beta1.PodGroupTemplate{{Name: "workers",
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 3}}}}}}
	if _, err := sched.Workloads(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Workload: %v", err)
	}
	for name, policy := range map[string]schedulingv1beta1.PodGroupSchedulingPolicy{
		"train-workers": {Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 3}},
		"loose":         {Basic: &schedulingv1beta1.BasicSchedulingPolicy{}},
	} {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: policy}}
		if name == "train-workers" {
			pg.Spec.WorkloadRef = &schedulingv1beta1.WorkloadReference{WorkloadName: "train", TemplateName: "workers"}
			pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: "placer.io/rack"}}}
		}
		got, err := sched.PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating PodGroup %s: %v", name, err)
		}
		if pg.Spec.SchedulingConstraints != nil && got.Spec.SchedulingConstraints == nil {
			t.Fatalf("PodGroup %s: the API server dropped schedulingConstraints (feature gate TopologyAwareWorkloadScheduling off?)", name)
		}
	}
	c.startScheduler()
	c.createPods(ns, podSpec{name: "w-0", schedGroup: "train-workers", gpus: 8}, podSpec{name: "w-1", schedGroup: "train-workers", gpus: 8},
		podSpec{name: "ghost-0", schedGroup: "ghost", gpus: 1},
		podSpec{name: "loose-0", schedGroup: "loose", gpus: 2}, podSpec{name: "loose-1", schedGroup: "loose", gpus: 3, cpu: "1"})
	msg := c.waitCondition(ns, "w-0", "Unschedulable", "2 of its gang minCount 3 pods exist", 30*time.Second)
	t.Logf("w-0: %s", msg)
	msg = c.waitCondition(ns, "ghost-0", "Unschedulable", "waiting for PodGroup wl/ghost (scheduling.k8s.io/v1beta1) to exist", 30*time.Second)
	t.Logf("ghost-0: %s", msg)
	// The basic policy's pods differ, and are placed one by one.
	c.waitBound(ns, 30*time.Second, "w-0", "w-1", "ghost-0")
	for _, p := range c.pods(ns) {
		if strings.HasPrefix(p.Name, "w-") && p.Spec.NodeName != "" {
			t.Fatalf("%s bound to %s before its gang's minCount", p.Name, p.Spec.NodeName)
		}
	}
	c.createPods(ns, podSpec{name: "w-2", schedGroup: "train-workers", gpus: 8})
	ps := c.waitBound(ns, 60*time.Second, "ghost-0")
	labels := nodeLabels(c)
	racks := map[string]bool{}
	rec := c.recorded()
	for _, p := range ps {
		if strings.HasPrefix(p.Name, "w-") {
			racks[labels[p.Spec.NodeName]["placer.io/rack"]] = true
		}
		if choice := rec[ns+"/"+p.Name]; p.Spec.NodeName != "" && (len(choice) != 1 || choice[0] != p.Spec.NodeName) {
			t.Errorf("pod %s bound to %s, Placer chose %v", p.Name, p.Spec.NodeName, choice)
		}
	}
	if len(racks) != 1 {
		t.Errorf("the gang spans racks %v", racks)
	}
	c.checkCapacity()
}

// The native PodGroup with coscheduling's meaning: minCount 2 over a
// launcher and three workers of different sizes, on two nodes with room
// for two workers: the launcher and two workers are bound (at least
// minCount, and more as they fit), the third worker waits, and the
// PodGroup's condition PodGroupInitiallyScheduled turns True.
func TestNativePodGroupMinCountAndStatus(t *testing.T) {
	c := newCluster(t, 4, 0)
	ctx := context.Background()
	ns := "native"
	c.createPods(ns)
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "mixed", Namespace: ns},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
	if _, err := c.cs.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.startScheduler()
	two := []string{"node-1", "node-2"}
	c.createPods(ns, podSpec{name: "launcher", schedGroup: "mixed", cpu: "2", hosts: two},
		podSpec{name: "worker-0", schedGroup: "mixed", gpus: 8, hosts: two}, podSpec{name: "worker-1", schedGroup: "mixed", gpus: 8, hosts: two},
		podSpec{name: "worker-2", schedGroup: "mixed", gpus: 8, hosts: two})
	c.waitBound(ns, 60*time.Second, "worker-2")
	msg := c.waitCondition(ns, "worker-2", "Unschedulable", "Insufficient nvidia.com/gpu", 30*time.Second)
	t.Logf("worker-2: %s", msg)
	var cond string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got, err := c.cs.SchedulingV1beta1().PodGroups(ns).Get(ctx, "mixed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cd := range got.Status.Conditions {
			if cd.Type == schedulingv1beta1.PodGroupInitiallyScheduled {
				cond = string(cd.Status) + "/" + cd.Reason + ": " + cd.Message
			}
		}
		if strings.HasPrefix(cond, "True/Scheduled") {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if cond != "True/Scheduled: 3 of its 4 pods scheduled (gang minCount 2)" {
		t.Errorf("PodGroupInitiallyScheduled: %q", cond)
	}
	c.checkCapacity()
}

// The API server restarted with the Workload API on after the scheduler
// started without it: the scheduler reads the native PodGroups from then
// on (asked again every --rediscover), without a restart of its own. A
// gang of minCount 2 then waits for its second pod and is bound whole.
func TestNativePodGroupsServedAfterTheScheduler(t *testing.T) {
	t.Setenv("PLACER_K8S_WORKLOAD_API", "0")
	c := newCluster(t, 4, 0)
	c.startScheduler("--rediscover", "500ms", "--lease-duration", "60s", "--renew-deadline", "45s") // leading across the restart
	waitFor(t, 30*time.Second, "the scheduler started without native PodGroups", func() (bool, string) {
		return strings.Contains(c.schedulerLog(), "does not serve scheduling.k8s.io/v1beta1 podgroups"), ""
	})
	t.Setenv("PLACER_K8S_WORKLOAD_API", "1")
	script(t, "restart-apiserver", "--dir", c.dir, "--port", fmt.Sprint(c.port))
	waitFor(t, 60*time.Second, "the scheduler reading native PodGroups", func() (bool, string) {
		return strings.Contains(c.schedulerLog(), "scheduling.k8s.io/v1beta1 podgroups read"), ""
	})
	ns := "late-wl"
	c.createPods(ns) // the namespace
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "pair", Namespace: ns},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
	if _, err := c.cs.SchedulingV1beta1().PodGroups(ns).Create(context.Background(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.createPods(ns, podSpec{name: "w-0", schedGroup: "pair", gpus: 8})
	if p := c.get(ns, "w-0"); p.Spec.SchedulingGroup == nil {
		t.Fatalf("the API server dropped w-0's spec.schedulingGroup: the Workload API is not on after the restart")
	}
	msg := c.waitCondition(ns, "w-0", "Unschedulable", "1 of its gang minCount 2 pods exist", 30*time.Second)
	t.Logf("w-0: %s", msg)
	c.createPods(ns, podSpec{name: "w-1", schedGroup: "pair", gpus: 8})
	if ps := c.waitBound(ns, 60*time.Second); len(ps) != 2 {
		t.Fatalf("%d pods bound, want the gang's 2", len(ps))
	}
	c.checkCapacity()
}
