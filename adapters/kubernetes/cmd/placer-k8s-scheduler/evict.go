package main

// Evictions (--evict): Placer's preemptions carried out through the
// Eviction API (policy/v1), so that PodDisruptionBudgets are respected.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"placer.local/kubernetes/internal/translate"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// refusedFor: a victim whose eviction was refused is not offered to Placer
// as one again for this long (its PodDisruptionBudget may allow it later).
const refusedFor = 30 * time.Second

type refusal struct {
	why   string
	until time.Time
}

type victim struct {
	uid             types.UID
	namespace, name string
	node            string
}

func (v victim) String() string { return v.namespace + "/" + v.name + " on " + v.node }

// notEvictable: Options.NotEvictable, a victim refused lately.
func (s *scheduler) notEvictable(p *corev1.Pod) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.refused[p.UID]; ok {
		if time.Now().Before(r.until) {
			return "its eviction was refused: " + r.why
		}
		delete(s.refused, p.UID)
	}
	return ""
}

// waitForVictims: Options.Wait. A pod whose victims were evicted waits out
// of the rounds until they are gone (a victim terminating still holds its
// node; a new round would otherwise evict others for it). After a restart,
// when this replica does not know them, a pod nominated to a node
// (status.nominatedNodeName) waits while a pod of a lower priority is
// terminating there, as kube-scheduler's preemption does.
func (s *scheduler) waitForVictims(bound []*corev1.Pod) func(*corev1.Pod) string {
	terminating := map[string][]*corev1.Pod{}
	for _, p := range bound {
		if p.DeletionTimestamp != nil {
			terminating[p.Spec.NodeName] = append(terminating[p.Spec.NodeName], p)
		}
	}
	return func(p *corev1.Pod) string {
		s.mu.Lock()
		vs, known := s.preempting[p.UID]
		s.mu.Unlock()
		if known {
			var left []string
			for _, v := range vs {
				if q, err := s.pods.Pods(v.namespace).Get(v.name); err == nil && q.UID == v.uid && translate.Bound(q) {
					left = append(left, v.String())
				}
			}
			if len(left) > 0 {
				return fmt.Sprintf("placer: waiting for the pods evicted for it to terminate: %s", strings.Join(left, ", "))
			}
			s.mu.Lock()
			delete(s.preempting, p.UID)
			s.mu.Unlock()
			return ""
		}
		if n := p.Status.NominatedNodeName; n != "" {
			for _, q := range terminating[n] {
				if translate.Priority(q) < translate.Priority(p) {
					return fmt.Sprintf("placer: nominated to %s, waiting for the pods of a lower priority terminating there (%s/%s)", n, q.Namespace, q.Name)
				}
			}
		}
		return ""
	}
}

// preempt carries out a round's preemptions, the victims of each pending
// group together: a dry run of each victim's eviction first, so that one a
// PodDisruptionBudget protects (429) leaves all of that pod's victims
// running; then the evictions. No placement on a node that had a victim,
// nor of a pod a preemption is for, was bound this cycle (internal/plan):
// they are placed again once the victims are gone. A pod whose priority
// class says preemptionPolicy Never evicts nothing and waits.
func (s *scheduler) preempt(ctx context.Context, r *translate.Round, res *wire.ScheduleReplyT) {
	if !s.cfg.evict { // never asked without --evict; nothing is evicted without it
		slog.Error("Placer returned preemptions to a scheduler without --evict; none carried out", "preemptions", len(res.Preemptions))
		return
	}
	victims := r.Victims(res.Preemptions)
	placedOn := map[int][]string{}
	for _, pl := range res.Placements {
		for _, rp := range pl.Replicas {
			if int(pl.Job) < len(r.Units) && int(rp.Node) < len(r.C.Nodes) {
				placedOn[int(pl.Job)] = append(placedOn[int(pl.Job)], r.C.Nodes[rp.Node].Name)
			}
		}
	}
	jobs := make([]int, 0, len(victims))
	for j := range victims {
		jobs = append(jobs, j)
	}
	sort.Ints(jobs)
	for _, j := range jobs {
		vs := victims[j]
		if j < 0 { // a preemption for no pending job (a reclaim): never asked of Placer here
			slog.Warn("preemption for no pending pod left alone", "victims", translate.VictimSummary(vs))
			continue
		}
		g := r.Units[j]
		first := g.Pods[0]
		if first.Spec.PreemptionPolicy != nil && *first.Spec.PreemptionPolicy == corev1.PreemptNever {
			for _, p := range g.Pods {
				s.unschedulable(ctx, p, "Unschedulable", fmt.Sprintf(
					"placer: it fits only by preempting %s, and its preemptionPolicy is Never: it waits for room", translate.VictimSummary(vs)))
			}
			continue
		}
		refusedBy := ""
		for _, v := range vs {
			if err := s.evict(ctx, v, true); err != nil {
				refusedBy = s.refuse(v, err)
				break
			}
		}
		if refusedBy != "" {
			mEvict.WithLabelValues("not_tried").Add(float64(len(vs) - 1))
			for _, p := range g.Pods {
				s.unschedulable(ctx, p, "Unschedulable", fmt.Sprintf(
					"placer: preemption blocked: %s; no pod was evicted for it, and it is tried again (that victim is not chosen again for %v)",
					refusedBy, refusedFor))
			}
			continue
		}
		var gone []victim
		failed := ""
		for _, v := range vs {
			if err := s.evict(ctx, v, false); err != nil {
				failed = s.refuse(v, err)
				continue
			}
			mEvict.WithLabelValues("evicted").Inc()
			gone = append(gone, victim{uid: v.UID, namespace: v.Namespace, name: v.Name, node: v.Spec.NodeName})
			s.recorder.Eventf(v, corev1.EventTypeNormal, "Preempted", "placer: evicted for %s/%s (priority %d) on %s",
				first.Namespace, first.Name, translate.Priority(first), v.Spec.NodeName)
		}
		slog.Info("preempted", "for", g.Key, "evicted", len(gone), "of", len(vs), "victims", translate.VictimSummary(vs), "refused", failed)
		s.mu.Lock()
		for _, p := range g.Pods {
			s.preempting[p.UID] = gone
		}
		s.mu.Unlock()
		nodes := placedOn[j]
		for i, p := range g.Pods {
			if i < len(nodes) {
				patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nominatedNodeName": nodes[i]}})
				if _, err := s.cs.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
					slog.Warn("setting nominatedNodeName", "pod", p.Namespace+"/"+p.Name, "err", err)
				}
			}
			msg := fmt.Sprintf("placer: preempting: evicted %s for it; it is bound once they have terminated", victimList(gone))
			if failed != "" {
				msg = fmt.Sprintf("placer: preemption partly blocked: %s; evicted %s; it is tried again", failed, victimList(gone))
			}
			s.unschedulable(ctx, p, "Unschedulable", msg)
		}
	}
}

func victimList(vs []victim) string {
	if len(vs) == 0 {
		return "no pod"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return strings.Join(parts, ", ")
}

// evict posts pods/eviction for the pod (its UID as a precondition), a dry
// run when asked: the API server checks the pod's PodDisruptionBudget
// either way, and answers 429 when it would be violated.
func (s *scheduler) evict(ctx context.Context, p *corev1.Pod, dryRun bool) error {
	uid := p.UID
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	err := s.cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, DeleteOptions: opts})
	if apierrors.IsNotFound(err) {
		return nil // gone already: its room is free
	}
	return err
}

// refuse records a refused eviction and says why, in the API server's words.
func (s *scheduler) refuse(p *corev1.Pod, err error) string {
	why := err.Error()
	result := "failed"
	if st, ok := err.(apierrors.APIStatus); ok {
		why = st.Status().Message
		if d := st.Status().Details; d != nil {
			for _, c := range d.Causes {
				if c.Message != "" {
					why += " " + c.Message
				}
			}
		}
	}
	if apierrors.IsTooManyRequests(err) {
		result = "refused"
	}
	mEvict.WithLabelValues(result).Inc()
	slog.Warn("eviction refused", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName, "err", why)
	s.mu.Lock()
	s.refused[p.UID] = refusal{why: why, until: time.Now().Add(refusedFor)}
	s.mu.Unlock()
	return fmt.Sprintf("evicting %s/%s on %s was refused (%s)", p.Namespace, p.Name, p.Spec.NodeName, why)
}
