package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func (c *cluster) priorityClasses(classes map[string]int32) {
	for name, v := range classes {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if _, err := c.cs.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
}

// runningPod: a pod already on `node` (spec.nodeName at creation, as a
// pod another scheduler placed), Running and Ready since `started`
// (status set as a kubelet would), asking `gpus` GPUs, ended at once when
// deleted (terminationGracePeriodSeconds 0: there is no kubelet to end it).
func (c *cluster) runningPod(ns, name, node, priority string, gpus int64, started time.Time) {
	ctx := context.Background()
	if _, err := c.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	zero := int64(0)
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, PriorityClassName: priority, TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "c", Image: "none", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), "nvidia.com/gpu": q},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": q}}}}},
	}
	p, err := c.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("creating pod %s: %v", name, err)
	}
	st := metav1.NewTime(started)
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &st, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: st},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: st}}}
	if _, err := c.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("status of pod %s: %v", name, err)
	}
}

// pdb: a PodDisruptionBudget over app=<app> with its status set as the
// disruption controller would (there is no controller-manager here): one
// pod, healthy, `allowed` disruptions.
func (c *cluster) pdb(ns, name, app string, allowed int32) {
	ctx := context.Background()
	one := intstr.FromInt32(1)
	b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	if allowed == 0 {
		b.Spec.MinAvailable = &one
	} else {
		b.Spec.MaxUnavailable = &one
	}
	b, err := c.cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, b, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	b.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: b.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 1, DesiredHealthy: 1 - allowed, ExpectedPods: 1}
	if _, err := c.cs.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) events(ns, name, reason string) []string {
	l, err := c.cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", name),
			fields.OneTermEqualSelector("reason", reason)).String()})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Message)
	}
	return out
}

// waitEvents: the messages of the pod's Events of `reason` once one
// contains `want`, or all of them after `timeout` (Events are sent
// asynchronously, after what they report).
func (c *cluster) waitEvents(ns, name, reason, want string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		ev := c.events(ns, name, reason)
		for _, m := range ev {
			if strings.Contains(m, want) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			return ev
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *cluster) exists(ns, name string) bool {
	_, err := c.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
	return err == nil
}

// Evictions (--evict): four nodes of 8 GPUs are full; a high-priority
// 8-GPU pod fits only by preempting. node-3 and node-4 run pods of its own
// priority (never victims); node-1 runs `guarded` (low priority, started a
// minute ago: the cheapest victim by lost work), which a
// PodDisruptionBudget protects (0 disruptions allowed), node-2 `spare`
// (low priority, an hour old), whose budget allows one. Without the flag
// nothing is evicted and the pod waits. With it, Placer picks `guarded`
// first: the Eviction API refuses it (429), the pod waits, told why, and
// `guarded` keeps running; the next round picks `spare`, evicted through
// the API, and the pod is bound on node-2.
func TestEvictionsRespectPodDisruptionBudgets(t *testing.T) {
	c := newCluster(t, 4, 0)
	c.priorityClasses(map[string]int32{"low": 10, "high": 1000})
	ns := "evict"
	now := time.Now()
	c.runningPod(ns, "guarded", "node-1", "low", 8, now.Add(-time.Minute))
	c.runningPod(ns, "spare", "node-2", "low", 8, now.Add(-time.Hour))
	c.runningPod(ns, "peer-3", "node-3", "high", 8, now.Add(-time.Minute))
	c.runningPod(ns, "peer-4", "node-4", "high", 8, now.Add(-time.Minute))
	c.pdb(ns, "guard", "guarded", 0)
	c.pdb(ns, "spare-budget", "spare", 1)
	c.createPods(ns, podSpec{name: "urgent", gpus: 8, priority: "high"})

	// Without --evict: the pod waits, nothing is evicted.
	c.startScheduler()
	msg := c.waitCondition(ns, "urgent", "Unschedulable", "0/4 nodes are available:", 30*time.Second)
	t.Logf("without --evict: %s", msg)
	time.Sleep(3 * time.Second) // three more cycles
	for _, v := range []string{"guarded", "spare", "peer-3", "peer-4"} {
		if !c.exists(ns, v) {
			t.Fatalf("pod %s is gone without --evict", v)
		}
	}
	if p, _ := c.cs.CoreV1().Pods(ns).Get(context.Background(), "urgent", metav1.GetOptions{}); p.Spec.NodeName != "" {
		t.Fatalf("urgent bound to %s without --evict", p.Spec.NodeName)
	}
	if ev := c.events(ns, "spare", "Preempted"); len(ev) > 0 {
		t.Errorf("a Preempted event without --evict: %q", ev)
	}
	c.stopScheduler(syscall.SIGTERM)

	// With --evict (and the RBAC it needs).
	c.applyRBACFile("deploy/kubernetes/scheduler-rbac-evict.yaml")
	hp := freePorts(t, 1)
	c.startScheduler("--evict", "--http", fmt.Sprintf("127.0.0.1:%d", hp))
	ps := c.waitBound(ns, 60*time.Second)
	var urgent *corev1.Pod
	for i := range ps {
		if ps[i].Name == "urgent" {
			urgent = &ps[i]
		}
	}
	if urgent == nil || urgent.Spec.NodeName != "node-2" {
		t.Fatalf("urgent not bound on node-2 (spare's): %+v", urgent)
	}
	if c.exists(ns, "spare") {
		t.Errorf("spare, evicted for urgent, still exists")
	}
	for _, v := range []string{"guarded", "peer-3", "peer-4"} {
		if !c.exists(ns, v) {
			t.Errorf("pod %s is gone", v)
		}
	}
	blocked := strings.Join(c.waitEvents(ns, "urgent", "FailedScheduling", "preemption blocked", 15*time.Second), "\n")
	if !strings.Contains(blocked, "preemption blocked: evicting evict/guarded on node-1 was refused") ||
		!strings.Contains(blocked, "The disruption budget guard needs 1 healthy pods and has 1 currently") {
		t.Errorf("urgent's events do not say that guarded's budget blocked its eviction:\n%s", blocked)
	}
	preempted := c.waitEvents(ns, "spare", "Preempted", "evicted for", 15*time.Second)
	if len(preempted) != 1 || !strings.Contains(preempted[0], "evicted for evict/urgent (priority 1000) on node-2") {
		t.Errorf("spare's Preempted events: %q", preempted)
	}
	t.Logf("urgent: %s", blocked)
	// status.nominatedNodeName was set while it waited (the binding clears it).
	if l := c.schedulerLog(); strings.Contains(l, "setting nominatedNodeName") || !strings.Contains(l, `msg=preempted for=pod/evict/urgent evicted=1`) {
		t.Errorf("the scheduler's log does not show one preemption with its nomination:\n%s", l)
	}
	c.checkCapacity()
	metrics := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", hp), 200)
	for _, want := range []string{`placer_k8s_evictions_total{result="evicted"} 1`, `placer_k8s_evictions_total{result="refused"} 1`} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
