package e2e

// The tests' node-lifecycle loop: there is no kubelet on these nodes, so
// this loop plays the part of theirs for the pods bound to them. A pod
// bound to a node becomes Running (started, its containers running and
// Ready); one whose annotation RunFor gives a duration then Succeeds that
// long after it started (its containers terminated with exit code 0). A
// node lost (lose) turns NotReady and its pods Failed, as the node
// lifecycle controller and the pod garbage collector would leave them.
// The status is written through the status subresource, as a kubelet's.

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunFor: how long a pod runs before it succeeds ("2s"; absent: it runs on).
const RunFor = "test.placer.io/run-for"

type kubelet struct {
	c      *cluster
	ns     string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	lost    map[string]bool
	started map[string]string // pod -> the node it started on
	errs    []string
}

// startKubelet runs the loop over namespace ns until the test ends.
func (c *cluster) startKubelet(ns string) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{c: c, ns: ns, cancel: cancel, done: make(chan struct{}), lost: map[string]bool{}, started: map[string]string{}}
	go k.loop(ctx)
	c.t.Cleanup(k.stop)
	return k
}

func (k *kubelet) stop() {
	k.cancel()
	<-k.done
}

func (k *kubelet) loop(ctx context.Context) {
	defer close(k.done)
	for ctx.Err() == nil {
		l, err := k.c.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range l.Items {
				k.step(ctx, &l.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *kubelet) step(ctx context.Context, p *corev1.Pod) {
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return
	}
	k.mu.Lock()
	lost := k.lost[p.Spec.NodeName]
	k.mu.Unlock()
	now := metav1.Now()
	switch {
	case lost:
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason, p.Status.Message = "NodeLost", "the node "+p.Spec.NodeName+" was lost"
		setReady(p, false, now)
	case p.Status.Phase != corev1.PodRunning:
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		setReady(p, true, now)
		p.Status.ContainerStatuses = nil
		for _, ctr := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, Ready: true,
				Started: ptrTo(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
		}
		k.mu.Lock()
		if was, ok := k.started[p.Name]; ok && was != p.Spec.NodeName {
			k.errs = append(k.errs, p.Name+" started on "+was+" and again on "+p.Spec.NodeName)
		}
		k.started[p.Name] = p.Spec.NodeName
		k.mu.Unlock()
	default:
		d, err := time.ParseDuration(p.Annotations[RunFor])
		if err != nil || p.Status.StartTime == nil || time.Since(p.Status.StartTime.Time) < d {
			return
		}
		p.Status.Phase = corev1.PodSucceeded
		setReady(p, false, now)
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, ptrTo(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: *p.Status.StartTime, FinishedAt: now}}
		}
	}
	if _, err := k.c.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.mu.Lock()
		k.errs = append(k.errs, p.Name+": "+err.Error())
		k.mu.Unlock()
	}
}

func setReady(p *corev1.Pod, ready bool, now metav1.Time) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady} {
		found := false
		for i := range p.Status.Conditions {
			if cd := &p.Status.Conditions[i]; cd.Type == t {
				if cd.Status != st {
					cd.Status, cd.LastTransitionTime = st, now
				}
				found = true
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: st, LastTransitionTime: now})
		}
	}
}

// lose: node `name` stops: NotReady, and its pods Failed from now on.
func (k *kubelet) lose(name string) {
	k.mu.Lock()
	k.lost[name] = true
	k.mu.Unlock()
	ctx := context.Background()
	n, err := k.c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		k.c.t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
			n.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if _, err := k.c.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		k.c.t.Fatal(err)
	}
}

// problems: what went wrong in the loop (a status refused, a pod started twice).
func (k *kubelet) problems() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.errs...)
}
