package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/plan"
	"placer.local/kubernetes/internal/translate"
)

// claimGrace: how long a pod waits for the claims of its templates
// before it says so.
const claimGrace = 30 * time.Second

// snapshot: the pods that hold nodes (bound, or bound by us and not seen
// yet), ours pending (no gate left), how many of ours are gated, and
// those of ours whose claims are not there yet, with why (they wait out
// of the rounds, as gated pods do, but say so).
func (s *scheduler) snapshot(ds *dra.Snapshot) (pending, bound []*corev1.Pod, gated int, claimWait map[*corev1.Pod]string) {
	all, _ := s.pods.List(labels.Everything())
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, a := range s.assumed {
		limit := 2 * time.Minute // the informer would have shown it by now
		if a.provisioning {
			limit = provisionTimeout
		}
		if time.Since(a.when) > limit {
			delete(s.assumed, uid)
		}
	}
	keep := map[types.UID]bool{}
	for _, p := range all {
		if a, ok := s.assumed[p.UID]; ok && p.Spec.NodeName == "" {
			if !a.provisioning || !s.provisioned(p, a.pod.Spec.NodeName) {
				bound = append(bound, a.pod)
				continue
			}
			delete(s.assumed, p.UID) // its volumes are there, or its node is no longer theirs: a round again
		}
		switch {
		case translate.Bound(p):
			bound = append(bound, p)
		case s.ours(p):
			if why := resolveWait(ds, p); why != "" {
				if claimWait == nil {
					claimWait = map[*corev1.Pod]string{}
				}
				claimWait[p] = why
				continue
			}
			pending = append(pending, p)
			keep[p.UID] = true
		case s.mine(p):
			gated++
		}
	}
	s.queue.Prune(keep)
	return pending, bound, gated, claimWait
}

// cycle: one look at the pending pods; those ready (not backing off) are
// planned, bound or told why not. more: pods were left untried; next: when
// the first pod backing off is ready.
func (s *scheduler) cycle(ctx context.Context) (more bool, next time.Time) {
	start := time.Now()
	mSchedNums.Inc()
	n := s.cycles.Add(1)
	ds := s.claims.snapshot()
	pending, bound, gated, claimWait := s.snapshot(ds)
	mGated.Set(float64(gated))
	mClaimWait.Set(float64(len(claimWait)))
	for p, why := range claimWait { // said once (unschedulable writes only a change)
		// A claim the resourceclaim controller has yet to make from its
		// template is said only once the pod has waited claimGrace: a burst
		// of new pods would otherwise cost a status write each, in the
		// cycle (kube-scheduler's PreEnqueue writes nothing).
		if strings.HasSuffix(why, resourceclaim.ErrClaimNotFound.Error()) && time.Since(p.CreationTimestamp.Time) < claimGrace {
			continue
		}
		s.unschedulable(ctx, p, "Unschedulable", "placer: waiting for the pod's ResourceClaims: "+why)
	}
	mPending.Set(float64(len(pending)))
	ready, urgent, backingOff, next := s.queue.Ready(pending, start)
	mBackoff.Set(float64(backingOff))
	defer func() {
		unsched := 0
		for _, p := range pending {
			if s.queue.Attempts(p.UID) > 0 {
				unsched++
			}
		}
		mUnsched.Set(float64(unsched))
		s.groups.sync(ctx)
	}()
	if len(ready) == 0 {
		return false, next
	}
	batch, cut := plan.Cut(ready, urgent, s.cfg.batchMax)
	nodes, _ := s.nodes.List(labels.Everything())
	volumes := map[types.UID]*translate.Volumes{} // read once a cycle: the rounds ask of each pod several times
	opt := translate.Options{TopologyLabels: s.cfg.topology, Stacking: s.cfg.stacking, NamespaceLabels: s.namespaceLabels, DRA: ds,
		Kueue: s.kueue.snapshot(), Attach: s.attacher(), ControlPlane: s.controlPlane, SoloClaims: s.soloClaims, VolumeNodes: func(p *corev1.Pod) *translate.Volumes {
			v, ok := volumes[p.UID]
			if !ok {
				v = s.volumeNodes(p)
				volumes[p.UID] = v
			}
			return v
		}}
	hold := func(p *corev1.Pod) string { return s.volumeHold(ds, p) }
	if s.cfg.evict {
		opt.Evict, opt.NotEvictable = true, s.notEvictable
		victims := s.waitForVictims(bound)
		hold = func(p *corev1.Pod) string {
			if why := s.volumeHold(ds, p); why != "" {
				return why
			}
			return victims(p)
		}
	}
	out := plan.Run(plan.Input{Nodes: nodes, Bound: bound, Pending: batch, Group: s.groups.group, Hold: hold, Opt: opt,
		Now: start, Rounds: s.cfg.rounds, Solve: s.pc.Solve})
	mRounds.Add(float64(out.Rounds))
	if out.Rounds > 0 {
		mRoundSec.Observe(out.PlacerTime.Seconds())
		s.warnGPUsLeftOut(out.GPUsLeftOut)
	}
	switch {
	case out.Err == "":
		if out.Rounds > 0 {
			mCycles.WithLabelValues("ok").Inc()
			s.mu.Lock()
			s.lastErr, s.lastOK = "", time.Now()
			s.mu.Unlock()
		}
	default:
		result := "placer_unavailable"
		if strings.Contains(out.Err, "refused the round") {
			result = "placer_refused"
		}
		mCycles.WithLabelValues(result).Inc()
		s.mu.Lock()
		s.lastErr = out.Err
		s.mu.Unlock()
		slog.Warn("cycle without all its rounds", "pending", len(batch), "why", out.Err)
	}
	for _, pr := range out.Preemptions {
		s.preempt(ctx, pr.Round, pr.Reply)
	}
	t1 := time.Now()
	nBound, nFailed := s.bind(ctx, out.Binds, n)
	bindTime := time.Since(t1)
	now := time.Now()
	s.groups.tried(out.Groups, now)
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.bindWorkers) // the conditions, as many at once as bindings
	for _, f := range out.Failed {
		s.queue.Failed(f.Pod.UID, now, f.ForNodes)
		why := f.Why
		if out.Err != "" && f.Reason == "SchedulerError" && strings.HasPrefix(why, out.Err) {
			why += fmt.Sprintf("; tried again in at most %v", s.queue.Max)
		}
		why = s.groups.timedOut(f, now, why)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.unschedulable(ctx, f.Pod, f.Reason, why)
		}()
	}
	wg.Wait()
	mCycleSec.Observe(time.Since(start).Seconds())
	level := slog.LevelDebug // a cycle that changed nothing is not logged at info
	if nBound > 0 || nFailed > 0 || len(out.Failed) != s.lastUnplaced || len(out.Preemptions) > 0 {
		level = slog.LevelInfo
	}
	s.lastUnplaced = len(out.Failed)
	slog.Log(ctx, level, "cycle", "n", n, "pending", len(pending), "ready", len(ready), "tried", len(batch), "backing_off", backingOff,
		"rounds", out.Rounds, "nodes", len(nodes), "bound", nBound, "bind_failed", nFailed, "unplaced_pods", len(out.Failed),
		"untried", len(out.Untried)+cut, "preemptions", len(out.Preemptions),
		"placer_ms", float64(out.PlacerTime.Microseconds())/1000, "bind_ms", bindTime.Milliseconds(),
		"cycle_ms", time.Since(start).Milliseconds())
	return len(out.Untried) > 0 || cut > 0, next
}

// bindTimeout bounds a cycle's bindings once they no longer follow the
// scheduler's context (bind): a stopping replica's last ones.
const bindTimeout = 20 * time.Second

// bind: the placements through the Binding subresource, --bind-workers at
// once, each assumed first (so that a cycle that starts before the
// informer sees them counts their requests), a share's GPU index in the
// Binding's annotations (the API server copies them onto the pod).
func (s *scheduler) bind(ctx context.Context, binds []plan.Bind, cycle int64) (int64, int64) {
	s.mu.Lock()
	for _, b := range binds {
		s.assumed[b.Pod.UID] = assumed{pod: b.Assumed(), when: time.Now()}
	}
	s.mu.Unlock()
	if s.cfg.record != "" && len(binds) > 0 {
		var sb strings.Builder
		for _, x := range binds {
			fmt.Fprintf(&sb, "%s/%s %s %d\n", x.Pod.Namespace, x.Pod.Name, x.Node, cycle)
		}
		if f, err := os.OpenFile(s.cfg.record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(sb.String())
			_ = f.Close()
		} else {
			slog.Error("--record", "err", err)
		}
	}
	var nBound, nFailed atomic.Int64
	failed := func(b plan.Bind, err error) {
		nFailed.Add(1)
		mBindErr.Inc()
		s.mu.Lock()
		delete(s.assumed, b.Pod.UID) // it holds nothing: the next round sees its node without it
		s.mu.Unlock()
		s.queue.Failed(b.Pod.UID, time.Now(), false)
		slog.Warn("binding refused", "pod", b.Pod.Namespace+"/"+b.Pod.Name, "node", b.Node, "err", err)
		// A pod bound already (another replica, an earlier life of this
		// one) answers Conflict: it is not bound twice.
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			s.recorder.Eventf(b.Pod, corev1.EventTypeWarning, "FailedBinding", "placer: binding to %s failed: %v", b.Node, err)
		}
	}
	// Each pod's claims written before its Binding (kube-scheduler's
	// PreBind), in two phases: pods sharing a claim that another pod of the
	// cycle allocates go once that pod's writes are done.
	//
	// A stop (SIGTERM: a rolling update) starts no further binding, and
	// lets the ones under way finish, their Events recorded before the
	// broadcaster is flushed: a Binding cancelled mid-request could be
	// made by the API server and read here as failed, its pod bound with no
	// Scheduled event (KubernetesLive.ChartInstallAndUpgrade). A pod not
	// started is the next leader's.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bindTimeout)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.bindWorkers)
	for _, phase := range s.claims.phases(binds) {
		for _, b := range phase {
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if ctx.Err() != nil {
					s.mu.Lock()
					delete(s.assumed, b.Pod.UID)
					s.mu.Unlock()
					return
				}
				ctx := wctx
				if err := s.claims.reserveAll(ctx, b); err != nil {
					failed(b, fmt.Errorf("its ResourceClaims: %w", err))
					return
				}
				if wait, err := s.provision(ctx, b); err != nil {
					failed(b, fmt.Errorf("its PersistentVolumeClaims: %w", err))
					return
				} else if wait {
					return
				}
				if s.cfg.bindDelay > 0 {
					time.Sleep(s.cfg.bindDelay)
				}
				binding := &corev1.Binding{
					ObjectMeta: metav1.ObjectMeta{Name: b.Pod.Name, Namespace: b.Pod.Namespace, UID: b.Pod.UID},
					Target:     corev1.ObjectReference{Kind: "Node", Name: b.Node},
				}
				if b.GPU >= 0 { // the GPU of the share, for the device plugin
					binding.Annotations = map[string]string{translate.GPUIndexAnnot: strconv.Itoa(b.GPU)}
				}
				err := s.cs.CoreV1().Pods(b.Pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
				if err != nil {
					failed(b, err)
					return
				}
				nBound.Add(1)
				mBound.Inc()
				mLatency.Observe(s.latency(b.Pod).Seconds())
				s.queue.Forget(b.Pod.UID)
				s.recorder.Eventf(b.Pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s",
					b.Pod.Namespace, b.Pod.Name, b.Node)
			}()
		}
		wg.Wait()
	}
	return nBound.Load(), nFailed.Load()
}

// latency: from the pod's creation to now; a pod this replica first saw
// after it started counts from then, to the millisecond (creation times
// are whole seconds); one created before it started, from its creation.
func (s *scheduler) latency(p *corev1.Pod) time.Duration {
	s.mu.Lock()
	seen, ok := s.seen[p.UID]
	delete(s.seen, p.UID)
	s.mu.Unlock()
	from := p.CreationTimestamp.Time
	if ok && seen.After(s.syncedAt) && seen.Sub(from) < time.Second {
		from = seen
	}
	return time.Since(from)
}

// unschedulable sets PodScheduled=False with the reason and an Event, when
// the pod does not say so already. lastTransitionTime moves only when the
// condition's status does (a pod False already keeps its time).
func (s *scheduler) unschedulable(ctx context.Context, p *corev1.Pod, reason, msg string) {
	since := time.Now().UTC().Format(time.RFC3339)
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse {
			continue
		}
		if c.Reason == reason && c.Message == msg {
			return
		}
		if !c.LastTransitionTime.IsZero() {
			since = c.LastTransitionTime.UTC().Format(time.RFC3339)
		}
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": "PodScheduled", "status": "False", "reason": reason, "message": msg, "lastTransitionTime": since,
	}}}})
	_, err := s.cs.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		slog.Warn("setting PodScheduled", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	s.recorder.Event(p, corev1.EventTypeWarning, "FailedScheduling", msg)
}

// namespaceLabels: Options.NamespaceLabels, from the namespaces' informer.
func (s *scheduler) namespaceLabels(ns string) map[string]string {
	if n, err := s.nss.Get(ns); err == nil {
		return n.Labels
	}
	return nil
}

// warnGPUsLeftOut logs each node whose GPUs the rounds leave out (more
// than Placer takes on one node) when it first is, not at every cycle.
func (s *scheduler) warnGPUsLeftOut(nodes []string) {
	now := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		now[n] = true
		if !s.gpusLeftOut[n] {
			slog.Warn("a node's GPUs are left out of the rounds: more than Placer takes on one node; its CPU and memory are still scheduled",
				"node", n, "most", translate.MaxNodeGPUs)
		}
	}
	s.gpusLeftOut = now
}
