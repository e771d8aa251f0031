package main

// Kueue's LocalQueues and ClusterQueues (kueue.x-k8s.io, CRDs), read
// through dynamic informers when the API server serves them (asked at
// start, then every --rediscover until it does: discover.go): each cycle's rounds carry its ClusterQueues and cohorts as Placer's
// queue tree (translate.Kueue). Without them the scheduler sends no tree,
// as before.

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"

	"placer.local/kubernetes/internal/translate"
)

// kueueVersions: the versions read, the first served (v1beta2 is Kueue's
// stored version since v0.15; v1beta1 names the cohort spec.cohort).
var kueueVersions = []string{"v1beta2", "v1beta1"}

type kueue struct {
	s        *scheduler
	lists    atomic.Pointer[kueueLists] // nil: Kueue is not read (yet)
	reported map[string]string          // a ClusterQueue's last parse error, said once
}

// kueueLists: the synced informers' listers.
type kueueLists struct {
	lq, cq cache.GenericLister
	jobs   batchlisters.JobLister
}

// start: the informers, where the API server serves both kinds; else asked
// again every `every` (0: never) until it does.
func (k *kueue) start(ctx context.Context, every time.Duration) {
	k.reported = map[string]string{}
	discover(ctx, every, "kueue.x-k8s.io localqueues and clusterqueues not served: queues are named ("+translate.QueueLabel+"), not limited", k.look)
}

// look: whether the API server serves both kinds; if it does, their
// informers are started and their listers kept (scheduler.kept).
func (k *kueue) look(ctx context.Context, later bool) bool {
	s := k.s
	for _, v := range kueueVersions {
		gv := "kueue.x-k8s.io/" + v
		if have := s.served(gv); !have["localqueues"] || !have["clusterqueues"] {
			continue
		}
		var l kueueLists
		var synced []cache.InformerSynced
		f := dynamicinformer.NewDynamicSharedInformerFactory(s.dyn, 0)
		changed := s.requeueOn(func(a, b any) bool { return specOf(a) != specOf(b) }) // a quota raised, say
		for _, res := range []string{"localqueues", "clusterqueues"} {
			i := f.ForResource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: v, Resource: res})
			_, _ = i.Informer().AddEventHandler(changed)
			synced = append(synced, i.Informer().HasSynced)
			if res == "localqueues" {
				l.lq = i.Lister()
			} else {
				l.cq = i.Lister()
			}
		}
		f.Start(ctx.Done())
		// Kueue's batch Jobs (those with a queue-name label): their pods' queue.
		jf := informers.NewSharedInformerFactoryWithOptions(s.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = translate.QueueLabel
		}))
		ji := jf.Batch().V1().Jobs()
		l.jobs = ji.Lister()
		synced = append(synced, ji.Informer().HasSynced)
		jf.Start(ctx.Done())
		return s.kept(ctx, later, func() { k.lists.Store(&l) },
			"Kueue's queues read: a pod's ClusterQueue is its Placer queue, limited by its quotas", []any{"version", gv}, synced...)
	}
	return false
}

// snapshot: the queues now (nil: Kueue is not read).
func (k *kueue) snapshot() *translate.Kueue {
	l := k.lists.Load()
	if l == nil {
		return nil
	}
	lqs, _ := l.lq.List(labels.Everything())
	cqs, _ := l.cq.List(labels.Everything())
	local := make(map[string]string, len(lqs))
	for _, o := range lqs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			key, cq := translate.ParseLocalQueue(u)
			local[key] = cq
		}
	}
	jobs := map[string]string{}
	js, _ := l.jobs.List(labels.Everything())
	for _, j := range js {
		jobs[j.Namespace+"/"+j.Name] = j.Labels[translate.QueueLabel]
	}
	var out []*translate.ClusterQueue
	for _, o := range cqs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		cq, err := translate.ParseClusterQueue(u)
		if err != nil { // its pods are then in no queue
			if k.reported[u.GetName()] != err.Error() {
				k.reported[u.GetName()] = err.Error()
				slog.Warn("a ClusterQueue not read: its pods are in no queue", "err", err)
			}
			continue
		}
		delete(k.reported, u.GetName())
		out = append(out, cq)
	}
	return translate.NewKueue(local, jobs, out)
}
