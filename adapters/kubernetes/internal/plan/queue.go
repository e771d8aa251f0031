// Package plan is the Placer scheduler's cycle without its API calls: the
// queue (which pending pods a cycle tries, in which order, and each pod's
// back-off after a failed attempt) and the plan (the pods of a cycle as
// Placer jobs, placed in one or more Placer rounds; what to bind and why
// the rest wait). docs/kubernetes.md describes both.
package plan

import (
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"placer.local/kubernetes/internal/translate"
)

// Backoff as kube-scheduler's (podInitialBackoffSeconds 1,
// podMaxBackoffSeconds 10): after its k-th failed attempt in a row a pod
// waits min(1 s x 2^(k-1), 10 s) before it is tried again.
const (
	InitialBackoff = time.Second
	MaxBackoff     = 10 * time.Second
)

type entry struct {
	attempts int
	last     time.Time // the last failed attempt
	until    time.Time // not tried before this
	looked   time.Time // the start of the cycle of its last failed attempt
	forNodes bool      // that attempt found room would not help it (Failed)
}

// Queue holds what the scheduler knows of each pending pod's attempts.
type Queue struct {
	mu       sync.Mutex
	entries  map[types.UID]*entry
	Initial  time.Duration
	Max      time.Duration
	looked   time.Time // the start of the last cycle (Ready)
	requeued time.Time // the last event that may let any pod that failed run (Requeue)
	freed    time.Time // the last pod's end (RoomFreed)
}

// NewQueue: kube-scheduler's back-off.
func NewQueue() *Queue {
	return &Queue{entries: map[types.UID]*entry{}, Initial: InitialBackoff, Max: MaxBackoff}
}

// Failed records a failed attempt of pod uid at `now`: it backs off.
// forNodes: the attempt found that room freed would not help it (it could
// not run on the cluster as it is even empty), so that a pod's end
// (RoomFreed) leaves it backing off; a change of the cluster (Requeue)
// does not.
func (q *Queue) Failed(uid types.UID, now time.Time, forNodes bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.entries[uid]
	if e == nil {
		e = &entry{}
		q.entries[uid] = e
	}
	e.attempts++
	d := q.Initial
	for i := 1; i < e.attempts && d < q.Max; i++ {
		d *= 2
	}
	e.last, e.until, e.looked, e.forNodes = now, now.Add(min(d, q.Max)), q.looked, forNodes
}

// Requeue: a change of the cluster at `now` that may let any pod that
// failed run: a node added or changed, a device claim deallocated,
// devices published, a volume claim bound, a device class, a PodGroup or
// a Kueue queue added or changed, a kind served. A pod whose failed
// attempt looked at the cluster before it is ready again, its back-off
// cut short (its attempts still counted): as kube-scheduler's queueing
// hints move a pod that such an event may help out of its unschedulable
// pods, and it pops its back-off queue when nothing else waits
// (KEP-5142); a cycle here takes all it has at once. Without it (and
// RoomFreed), GPUs freed or devices come stayed idle for up to MaxBackoff.
func (q *Queue) Requeue(now time.Time) {
	q.mu.Lock()
	if now.After(q.requeued) {
		q.requeued = now
	}
	q.mu.Unlock()
}

// RoomFreed: a bound pod finished or was deleted at `now`: as Requeue for
// the pods whose attempt found room might help them, not for those that
// could not run even on the empty cluster (Failed's forNodes: a backlog
// of such pods would otherwise go to Placer after every pod's end; at
// 5,000 nodes a cut of 2,000 costs the scheduler about 0.24 s of CPU).
func (q *Queue) RoomFreed(now time.Time) {
	q.mu.Lock()
	if now.After(q.freed) {
		q.freed = now
	}
	q.mu.Unlock()
}

// Retry: pod uid changed itself (its spec, labels or annotations: a
// toleration added, say): ready at once, its attempts still counted, as
// kube-scheduler requeues a pod on an update that may let it run.
func (q *Queue) Retry(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.entries[uid]; e != nil {
		e.until = time.Time{}
	}
}

// Forget: the pod is bound or gone.
func (q *Queue) Forget(uid types.UID) {
	q.mu.Lock()
	delete(q.entries, uid)
	q.mu.Unlock()
}

// Attempts: the pod's failed attempts in a row.
func (q *Queue) Attempts(uid types.UID) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.entries[uid]; e != nil {
		return e.attempts
	}
	return 0
}

// Len: the pods with failed attempts on record.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries)
}

// Prune forgets the pods not in `keep` (deleted while no event said so).
func (q *Queue) Prune(keep map[types.UID]bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for uid := range q.entries {
		if !keep[uid] {
			delete(q.entries, uid)
		}
	}
}

// Ready orders the pending pods for a cycle at `now` and leaves out those
// backing off (not those requeued since their attempt, nor those room
// freed since may help): a pod group is ready when one of its pods is,
// and then all of its pending pods are.
// The order: priority, highest first; then the pods not tried yet before
// those that failed, and those by their last attempt, longest ago first
// (kube-scheduler's queue puts a pod that failed behind the pods that
// came meanwhile); then creation, oldest first; then namespace/name.
// `next` is when the first pod backing off is ready (zero: none backs off).
//
// urgent: the pods backing off whose priority is above the lowest of the
// ready ones, in the same order: a cycle that places pods of a lower
// priority takes them too, room permitting (Cut), so that no pod of a
// lower priority takes the room a higher one waits for while it backs off.
func (q *Queue) Ready(pods []*corev1.Pod, now time.Time) (ready, urgent []*corev1.Pod, backingOff int, next time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.looked = now
	groupReady := map[string]bool{}
	isReady := func(p *corev1.Pod) bool {
		e := q.entries[p.UID]
		return e == nil || !now.Before(e.until) || e.looked.Before(q.requeued) || (!e.forNodes && e.looked.Before(q.freed))
	}
	for _, p := range pods {
		if g := translate.GroupKey(p); g != "" && isReady(p) {
			groupReady[g] = true
		}
	}
	last := map[types.UID]time.Time{}
	var waiting []*corev1.Pod
	for _, p := range pods {
		if e := q.entries[p.UID]; e != nil {
			last[p.UID] = e.last
		}
		g := translate.GroupKey(p)
		if isReady(p) || (g != "" && groupReady[g]) {
			ready = append(ready, p)
			continue
		}
		waiting = append(waiting, p)
		backingOff++
		if u := q.entries[p.UID].until; next.IsZero() || u.Before(next) {
			next = u
		}
	}
	if len(ready) > 0 {
		low := translate.Priority(ready[0])
		for _, p := range ready {
			low = min(low, translate.Priority(p))
		}
		waitingGroup := map[string]bool{}
		for _, p := range waiting {
			if g := translate.GroupKey(p); translate.Priority(p) > low && g != "" {
				waitingGroup[g] = true
			}
		}
		for _, p := range waiting {
			if g := translate.GroupKey(p); translate.Priority(p) > low || (g != "" && waitingGroup[g]) {
				urgent = append(urgent, p)
			}
		}
	}
	sortQueue(urgent, last)
	sortQueue(ready, last)
	return ready, urgent, backingOff, next
}

// sortQueue: Ready's order, a pod group as its most urgent member.
func sortQueue(ready []*corev1.Pod, last map[types.UID]time.Time) {
	// A group sorts as its most urgent member.
	key := map[types.UID]*corev1.Pod{}
	lead := map[string]*corev1.Pod{}
	for _, p := range ready {
		key[p.UID] = p
		if g := translate.GroupKey(p); g != "" {
			if l, ok := lead[g]; !ok || before(p, l, last) {
				lead[g] = p
			}
		}
	}
	for _, p := range ready {
		if g := translate.GroupKey(p); g != "" {
			key[p.UID] = lead[g]
		}
	}
	sort.SliceStable(ready, func(i, j int) bool {
		a, b := key[ready[i].UID], key[ready[j].UID]
		if a != b {
			return before(a, b, last)
		}
		return before(ready[i], ready[j], last)
	})
}

func before(a, b *corev1.Pod, last map[types.UID]time.Time) bool {
	pa, pb := translate.Priority(a), translate.Priority(b)
	if pa != pb {
		return pa > pb
	}
	la, lb := last[a.UID], last[b.UID]
	if !la.Equal(lb) {
		return la.Before(lb) // zero (never failed) first
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// Cut: the first max pods of `ready` (in its order), each pod group kept
// whole (its members past the cut come along), then as many of `urgent`
// as the rest of max holds (whole groups too); and how many of `ready`
// were left out.
func Cut(ready, urgent []*corev1.Pod, max int) ([]*corev1.Pod, int) {
	if len(ready) < max && len(urgent) > 0 {
		extra, _ := Cut(urgent, nil, max-len(ready))
		return append(append([]*corev1.Pod(nil), ready...), extra...), 0
	}
	if len(ready) <= max {
		return ready, 0
	}
	keep := ready[:max:max]
	groups := map[string]bool{}
	for _, p := range keep {
		if g := translate.GroupKey(p); g != "" {
			groups[g] = true
		}
	}
	for _, p := range ready[max:] {
		if g := translate.GroupKey(p); g != "" && groups[g] {
			keep = append(keep, p)
		}
	}
	return keep, len(ready) - len(keep)
}
