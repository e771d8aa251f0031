// placer-k8s-bench: feeds one pod mix to a scheduler of a live cluster and
// measures it (scripts/k8s-side-by-side.sh runs it for kube-scheduler and
// for the Placer scheduler on fresh clusters): pods per second from the
// first creation to the last binding, GPUs placed, GPU nodes left partly
// used and the GPUs free on them, the FGD measure of fragmented GPUs,
// gangs whole / split across racks / stranded (partly bound), and
// constraint violations (a node's bound requests over its allocatable).
//
// The mix: the pods of an openb pod list (data/openb-sample/pods.csv)
// that ask whole GPUs or none (fractional ones are left out: no convention
// for them yet), in file order, cpu and memory as listed; and --gangs
// gangs of four 8-GPU pods (label scheduling.x-k8s.io/pod-group, annotation
// min-member 4), created first.
package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"placer.local/kubernetes/internal/translate"
)

type result struct {
	Scheduler     string  `json:"scheduler"`
	Nodes         int     `json:"nodes"`
	Pods          int     `json:"pods"`
	Bound         int     `json:"bound"`
	Seconds       float64 `json:"seconds_first_create_to_last_bind"`
	PodsPerSecond float64 `json:"pods_per_second"`
	CreateSeconds float64 `json:"create_seconds"`
	// --precreated: every pod created before the scheduler was started; the
	// pods/s from the scheduler's start (the signal file written) to the
	// last binding, and from the first binding to the last.
	Precreated        bool    `json:"precreated,omitempty"`
	StartToLastBind   float64 `json:"seconds_scheduler_start_to_last_bind,omitempty"`
	FirstToLastBind   float64 `json:"seconds_first_bind_to_last_bind,omitempty"`
	PodsPerSecondFrom float64 `json:"pods_per_second_from_scheduler_start,omitempty"`
	GPUsPlaced        int64   `json:"gpus_placed"`
	PartlyUsedNodes   int     `json:"gpu_nodes_partly_used"`
	FreeOnPartly      int64   `json:"gpus_free_on_partly_used_nodes"`
	GPUsFree          int64   `json:"gpus_free"`
	FGDFragmented     float64 `json:"fgd_fragmented_gpus"`
	GangsWhole        int     `json:"gangs_whole_one_rack"`
	GangsSplit        int     `json:"gangs_whole_split_across_racks"`
	GangsStranded     int     `json:"gangs_stranded"`
	Violations        int     `json:"violations"`
	// --dra: GPUsPlaced counts whole GPUs allocated to claims; this the rest.
	DRA *draResult `json:"dra,omitempty"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig")
	sched := flag.String("scheduler-name", "placer", "spec.schedulerName of the pods (default-scheduler: kube-scheduler)")
	podsFile := flag.String("pods", "data/openb-sample/pods.csv", "openb pod list")
	limit := flag.Int("limit", 0, "at most this many pods of the list (0: all)")
	gangs := flag.Int("gangs", 0, "gangs of four 8-GPU pods, created first")
	repeat := flag.Int("repeat", 1, "the pod list this many times over (names p-<k>-<i>)")
	settle := flag.Duration("settle", 10*time.Second, "stop when no pod was bound for this long")
	timeout := flag.Duration("timeout", 10*time.Minute, "stop after this long in any case")
	out := flag.String("json", "", "append the result as one JSON line to this file")
	draRepeat := flag.Int("dra", 0, "instead of openb's pods, the DRA mix (dra.go) this many times over, on nodes whose GPUs are devices (k8s-cluster.sh nodes --dra; the slices published here)")
	precreated := flag.String("precreated", "", "pods created with no scheduler running: write this file once all are created (the caller starts the scheduler then) and measure from then")
	flag.Parse()
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	rc.QPS, rc.Burst = 2000, 4000
	cs := kubernetes.NewForConfigOrDie(rc)
	ctx := context.Background()
	ns := "bench"
	_, _ = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})

	var pods []*corev1.Pod
	mk := func(name string, cpuMilli, memMiB, gpus int64) *corev1.Pod {
		return podOf(name, ns, *sched, cpuMilli, memMiB, gpus)
	}
	if *draRepeat > 0 {
		pods = draMix(ctx, cs, ns, *sched, *draRepeat)
	}
	for g := 0; g < *gangs; g++ {
		for i := 0; i < 4; i++ {
			p := mk(fmt.Sprintf("gang-%d-%d", g, i), 32000, 256<<10, 8)
			p.Labels["scheduling.x-k8s.io/pod-group"] = fmt.Sprintf("gang-%d", g)
			p.Annotations = map[string]string{"scheduling.x-k8s.io/min-member": "4"}
			pods = append(pods, p)
		}
	}
	rows := [][]string{{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}}
	if *draRepeat == 0 {
		rows = readCSV(*podsFile)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"} {
		if _, ok := col[h]; !ok {
			fail("%s: no column %q", *podsFile, h)
		}
	}
	n := 0
	for k := 0; k < *repeat; k++ {
		for _, r := range rows[1:] {
			num := func(h string) int64 { v, _ := strconv.ParseInt(r[col[h]], 10, 64); return v }
			if num("num_gpu") > 0 && num("gpu_milli") != 1000 {
				continue
			}
			if *limit > 0 && n >= *limit {
				break
			}
			pods = append(pods, mk(fmt.Sprintf("p-%d-%04d", k, n), num("cpu_milli"), num("memory_mib"), num("num_gpu")))
			n++
		}
	}

	var mu sync.Mutex
	bound := map[string]bool{}
	var lastBind, firstBind time.Time
	lastChange := time.Now()
	saw := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		mu.Lock()
		if !bound[p.Name] {
			bound[p.Name] = true
			lastBind, lastChange = time.Now(), time.Now()
			if firstBind.IsZero() {
				firstBind = lastBind
			}
		}
		mu.Unlock()
	}
	stop := make(chan struct{})
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: saw, UpdateFunc: func(_, o any) { saw(o) }})
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		fail("pod informer did not sync")
	}

	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan *corev1.Pod)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					fmt.Fprintf(os.Stderr, "create %s: %v\n", p.Name, err)
				}
			}
		}()
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	created := time.Since(start)
	schedStart := start
	if *precreated != "" {
		mu.Lock()
		early := len(bound)
		mu.Unlock()
		if early > 0 {
			fmt.Fprintf(os.Stderr, "--precreated: %d pods bound before the scheduler was to start\n", early)
		}
		if err := os.WriteFile(*precreated, []byte("created\n"), 0o644); err != nil {
			fail("--precreated: %v", err)
		}
		mu.Lock()
		schedStart, lastChange = time.Now(), time.Now()
		mu.Unlock()
	}

	// The bindings as they come, through a watch (an informer) on the
	// namespace: listing every pod each 50 ms cost the apiserver, on the
	// same cores as the schedulers, more than the schedulers' own work once
	// the pods were thousands.
	lastBindAt := start
	for time.Since(start) < *timeout {
		mu.Lock()
		b, since := len(bound), time.Since(lastChange)
		if b > 0 {
			lastBindAt = lastBind
		}
		mu.Unlock()
		if b == len(pods) || since > *settle {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	res := measure(ctx, cs, ns, *sched, pods)
	if *draRepeat > 0 {
		draMeasure(ctx, cs, ns, &res)
	}
	res.Pods = len(pods)
	res.Seconds = lastBindAt.Sub(start).Seconds()
	res.CreateSeconds = created.Seconds()
	if *precreated != "" {
		res.Precreated = true
		mu.Lock()
		res.StartToLastBind = lastBindAt.Sub(schedStart).Seconds()
		if !firstBind.IsZero() {
			res.FirstToLastBind = lastBindAt.Sub(firstBind).Seconds()
		}
		mu.Unlock()
		if res.StartToLastBind > 0 {
			res.PodsPerSecondFrom = float64(res.Bound) / res.StartToLastBind
		}
	}
	if res.Seconds > 0 {
		res.PodsPerSecond = float64(res.Bound) / res.Seconds
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	if *out != "" {
		if f, err := os.OpenFile(*out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.Write(append(b, '\n'))
			_ = f.Close()
		}
	}
}

func measure(ctx context.Context, cs kubernetes.Interface, ns, sched string, fed []*corev1.Pod) result {
	res := result{Scheduler: sched}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("%v", err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("%v", err)
	}
	res.Nodes = len(nodes.Items)
	used := map[string]corev1.ResourceList{}
	gangNodes := map[string][]string{}
	gangSize := map[string]int{}
	for _, p := range pods.Items {
		g := p.Labels["scheduling.x-k8s.io/pod-group"]
		if g != "" {
			gangSize[g]++
		}
		if p.Spec.NodeName == "" {
			continue
		}
		if p.Namespace == ns {
			res.Bound++
		}
		if g != "" {
			gangNodes[g] = append(gangNodes[g], p.Spec.NodeName)
		}
		rl := used[p.Spec.NodeName]
		if rl == nil {
			rl = corev1.ResourceList{}
			used[p.Spec.NodeName] = rl
		}
		for k, v := range translate.Requests(&p) {
			q := rl[k]
			q.Add(v)
			rl[k] = q
		}
	}
	rack := map[string]string{}
	tasks := typicalTasks(fed)
	var fgdMilli float64
	for _, n := range nodes.Items {
		rack[n.Name] = n.Labels["placer.io/rack"]
		a := n.Status.Allocatable
		u := used[n.Name]
		for _, r := range []corev1.ResourceName{"nvidia.com/gpu", corev1.ResourceCPU, corev1.ResourceMemory} {
			uq, aq := u[r], a[r]
			if uq.Cmp(aq) > 0 {
				res.Violations++
			}
		}
		ug, ag := u.Name("nvidia.com/gpu", resource.DecimalSI).Value(), a.Name("nvidia.com/gpu", resource.DecimalSI).Value()
		res.GPUsPlaced += ug
		if ug > 0 && ug < ag {
			res.PartlyUsedNodes++
			res.FreeOnPartly += ag - ug
		}
		res.GPUsFree += max(0, ag-ug)
		cpuFree := a.Cpu().MilliValue() - u.Cpu().MilliValue()
		fgdMilli += nodeFragmentation(max(0, ag-ug), cpuFree, tasks)
	}
	res.FGDFragmented = fgdMilli / 1000
	for g, size := range gangSize {
		nodes := gangNodes[g]
		switch {
		case len(nodes) == 0:
		case len(nodes) < size:
			res.GangsStranded++
		default:
			racks := map[string]bool{}
			for _, n := range nodes {
				racks[rack[n]] = true
			}
			if len(racks) == 1 {
				res.GangsWhole++
			} else {
				res.GangsSplit++
			}
		}
	}
	return res
}

// FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23), as the
// C++ simulator reports it (sim/src/fgd_policies.cpp: typical_tasks,
// node_fragmentation): the workload M is the pods fed to the scheduler,
// keyed by (CPU milli, per-GPU milli, GPUs), most frequent first (ties by
// key, descending) until 95% of them are covered, frequencies renormalised
// over those. A node's fragmentation F_n(M) is the expected free GPU milli
// that a task drawn from M cannot use: all its free milli when the task
// cannot run there (a CPU-only task, too few fitting GPUs, too little CPU),
// else the free milli on GPUs whose free share is below the task's per-GPU
// demand. The bench's pods ask whole GPUs, and Kubernetes counts whole GPUs
// (a node's free GPUs are allocatable less the bound pods' requests, each
// 1000 milli free), so F_n is 0 or all of a node's free GPUs for each task;
// summed over nodes, in GPUs.
type task struct {
	cpu, milli, gpus int64
	freq             float64
}

func typicalTasks(pods []*corev1.Pod) []task {
	type key struct{ cpu, milli, gpus int64 }
	counts := map[key]int64{}
	total := int64(0)
	for _, p := range pods {
		rl := translate.Requests(p)
		g := rl.Name("nvidia.com/gpu", resource.DecimalSI).Value()
		k := key{rl.Cpu().MilliValue(), 0, g}
		if g > 0 {
			k.milli = 1000
		}
		counts[k]++
		total++
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	less := func(a, b key) bool { // a before b: count descending, then key descending
		if counts[a] != counts[b] {
			return counts[a] > counts[b]
		}
		if a.cpu != b.cpu {
			return a.cpu > b.cpu
		}
		if a.milli != b.milli {
			return a.milli > b.milli
		}
		return a.gpus > b.gpus
	}
	sort.Slice(keys, func(i, j int) bool { return less(keys[i], keys[j]) })
	var out []task
	covered := int64(0)
	for _, k := range keys {
		if total > 0 && float64(covered) >= 0.95*float64(total) {
			break
		}
		out = append(out, task{cpu: k.cpu, milli: k.milli, gpus: k.gpus, freq: float64(counts[k])})
		covered += counts[k]
	}
	for i := range out {
		out[i].freq /= float64(max(covered, 1))
	}
	return out
}

// nodeFragmentation: F_n(M) in milli-GPU of a node with `free` whole GPUs
// free (1000 milli each) and cpuFree milli-CPU free.
func nodeFragmentation(free, cpuFree int64, m []task) float64 {
	total := free * 1000
	if total == 0 {
		return 0
	}
	frag := 0.0
	for _, t := range m {
		runs := t.gpus > 0 && t.cpu <= cpuFree && free >= t.gpus // every free GPU has 1000 >= t.milli
		if !runs {
			frag += t.freq * float64(total)
		} // else: no free GPU's share is below the task's per-GPU demand
	}
	return frag
}

// podOf: a pod of the bench, asking cpu, memory and whole GPUs
// (nvidia.com/gpu, requests and limits).
func podOf(name, ns, sched string, cpuMilli, memMiB, gpus int64) *corev1.Pod {
	req := corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI)}
	var lim corev1.ResourceList
	if gpus > 0 {
		req["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
		lim = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
		Spec: corev1.PodSpec{SchedulerName: sched, Containers: []corev1.Container{{Name: "c", Image: "none",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}}}
}

func readCSV(path string) [][]string {
	f, err := os.Open(path)
	if err != nil {
		fail("%v", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		fail("%s: %v", path, err)
	}
	return rows
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "placer-k8s-bench: "+format+"\n", a...)
	os.Exit(2)
}
