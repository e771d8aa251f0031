// placer-k8s-scheduler: the Placer service as the scheduler of a Kubernetes
// cluster for the pods with spec.schedulerName "placer" (docs/kubernetes.md).
//
// It watches pods and nodes through informers, gathers the pending pods into
// one round (a batch window bounded in time and size), asks Placer over
// ZeroMQ where they go, and binds them through the Binding subresource,
// many at a time. A gang (scheduling.x-k8s.io/pod-group) is bound only when
// Placer placed all of it. A pod Placer cannot place gets PodScheduled=False
// with Placer's reason in kube-scheduler's words and an Event, and is tried
// again in later cycles. Two replicas can run: the leader holds a Lease.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"placer.local/kubernetes/internal/placerclient"
	"placer.local/kubernetes/internal/translate"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

type config struct {
	kubeconfig, schedulerName, endpoint, serverKey, clientCert, rackLabel, httpAddr string
	leaseName, leaseNamespace, identity, record, contentType                        string
	timeout, window, retry, leaseDuration, renewDeadline, retryPeriod, bindDelay    time.Duration
	batchMax, bindWorkers                                                           int
	apiQPS                                                                          float64
	apiBurst                                                                        int
	leaderElect, stacking, evict                                                    bool
}

var refusedJob = regexp.MustCompile(`pending job (\d+) \(`)

var podGroupGVR = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

var (
	mCycles   = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "placer_k8s_cycles_total", Help: "Scheduling cycles by result (ok, placer_unavailable, placer_refused)."}, []string{"result"})
	mBound    = prometheus.NewCounter(prometheus.CounterOpts{Name: "placer_k8s_pods_bound_total", Help: "Pods bound through the Binding subresource."})
	mBindErr  = prometheus.NewCounter(prometheus.CounterOpts{Name: "placer_k8s_bind_errors_total", Help: "Bindings the API server refused."})
	mUnsched  = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_pods_unschedulable", Help: "Pods left unplaced by the last cycle."})
	mPending  = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_pods_pending", Help: "Pending pods in the last cycle's round."})
	mLeader   = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_leader", Help: "1 while this replica holds the Lease."})
	mCycleSec = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "placer_k8s_cycle_seconds", Help: "One cycle: round built, solved, binds done.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	mEvict    = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "placer_k8s_evictions_total", Help: "Evictions through the Eviction API (--evict), by result: evicted, refused (429: a PodDisruptionBudget), failed (another error), not_tried (a dry run of another victim of the same pod refused)."}, []string{"result"})
	mRoundSec = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "placer_k8s_placer_round_seconds", Help: "The round trip to the Placer service.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
)

func main() {
	var c config
	flag.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (empty: in-cluster config)")
	flag.StringVar(&c.schedulerName, "scheduler-name", "placer", "serve pods with this spec.schedulerName")
	flag.StringVar(&c.endpoint, "placer-endpoint", "tcp://127.0.0.1:5555", "the Placer service (placer serve); several replicas separated by commas: a round lost at one goes to the next")
	flag.DurationVar(&c.timeout, "placer-timeout", 5*time.Second, "wait at most this for Placer's reply")
	flag.StringVar(&c.serverKey, "placer-server-key", "", "CURVE: the service's public certificate (placer keygen)")
	flag.StringVar(&c.clientCert, "placer-client-cert", "", "CURVE: this scheduler's secret certificate (*.key_secret)")
	flag.DurationVar(&c.window, "batch-window", 200*time.Millisecond, "gather pending pods this long after the first before a round")
	flag.IntVar(&c.batchMax, "batch-max", 2000, "at most this many pending pods in one round (the oldest first)")
	flag.DurationVar(&c.retry, "retry-interval", 3*time.Second, "try unplaced pods again this often")
	flag.IntVar(&c.bindWorkers, "bind-workers", 64, "bindings in flight at once (16 left a 5,000-node round of 2,000 pods binding for 3-7 s on a shared 2-core control plane; 64 kept up with the pods' creation)")
	flag.Float64Var(&c.apiQPS, "kube-api-qps", 2000, "requests per second to the API server (client-go's limiter; each binding is a Binding and an Event, so at 500 the limiter held a 5,000-node cluster's bindings to about 510 a second)")
	flag.IntVar(&c.apiBurst, "kube-api-burst", 4000, "the limiter's burst")
	flag.StringVar(&c.contentType, "kube-api-content-type", "application/vnd.kubernetes.protobuf", "what the scheduler's requests and watches are encoded in (protobuf: less of the API server's CPU than JSON; application/json for a server or proxy without it)")
	flag.StringVar(&c.rackLabel, "rack-label", "placer.io/rack", "node label naming a node's rack (the topology Placer keeps gangs within); empty: none")
	flag.BoolVar(&c.stacking, "stacking", true, "Placer's stacking policy (whole-GPU pods fill used nodes first)")
	flag.BoolVar(&c.evict, "evict", false, "let a pending pod preempt bound pods of a lower priority: Placer chooses the victims, each evicted through the Eviction API (PodDisruptionBudgets respected; RBAC create on pods/eviction, deploy/kubernetes/scheduler-rbac-evict.yaml); off: no pod is ever evicted")
	flag.StringVar(&c.httpAddr, "http", "", "serve /metrics, /livez and /readyz on this address (e.g. 127.0.0.1:9556)")
	flag.BoolVar(&c.leaderElect, "leader-elect", true, "hold a Lease so that only one replica schedules")
	flag.StringVar(&c.leaseName, "lease-name", "placer-scheduler", "the Lease's name")
	flag.StringVar(&c.leaseNamespace, "lease-namespace", "kube-system", "the Lease's namespace")
	flag.StringVar(&c.identity, "identity", "", "this replica's name in the Lease (default: host name and pid)")
	flag.DurationVar(&c.leaseDuration, "lease-duration", 15*time.Second, "leader election: lease duration")
	flag.DurationVar(&c.renewDeadline, "renew-deadline", 10*time.Second, "leader election: renew deadline")
	flag.DurationVar(&c.retryPeriod, "retry-period", 2*time.Second, "leader election: retry period")
	flag.StringVar(&c.record, "record", "", "append Placer's choice for each pod, \"namespace/name node\" a line, to this file before binding it")
	flag.DurationVar(&c.bindDelay, "test-bind-delay", 0, "testing only: wait this long before each binding (widens the window in which a test kills the scheduler mid-batch)")
	flag.Parse()
	if flag.NArg() > 0 {
		fail("unexpected argument %q (flags only; see --help)", flag.Arg(0))
	}
	if c.batchMax < 1 || c.bindWorkers < 1 || c.window < 0 || c.retry <= 0 || c.apiQPS <= 0 || c.apiBurst < 1 {
		fail("--batch-max, --bind-workers and --kube-api-burst must be >= 1, --batch-window >= 0, --retry-interval and --kube-api-qps > 0")
	}
	if c.identity == "" {
		h, _ := os.Hostname()
		c.identity = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))

	var rc *rest.Config
	var err error
	if c.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	rc.QPS, rc.Burst = float32(c.apiQPS), c.apiBurst
	rc.UserAgent = "placer-k8s-scheduler"
	rc.ContentType = c.contentType
	rc.AcceptContentTypes = c.contentType
	if c.contentType != "application/json" {
		rc.AcceptContentTypes += ",application/json" // custom resources (PodGroups) have no protobuf
	}
	cs := kubernetes.NewForConfigOrDie(rc)
	dyn := dynamic.NewForConfigOrDie(rc)
	pc, err := placerclient.New(placerclient.Options{Endpoint: c.endpoint, Timeout: c.timeout, ServerKey: c.serverKey, ClientCert: c.clientCert})
	if err != nil {
		fail("placer: %v", err)
	}
	prometheus.MustRegister(mCycles, mBound, mBindErr, mUnsched, mPending, mLeader, mCycleSec, mRoundSec, mEvict)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s := newScheduler(c, cs, dyn, pc)
	if c.httpAddr != "" {
		s.serveHTTP(c.httpAddr)
	}
	go s.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.podsSynced, s.nodesSynced) {
		fail("informers did not sync")
	}
	s.synced.Store(true)
	slog.Info("informers synced", "scheduler", c.schedulerName, "placer", c.endpoint, "identity", c.identity)
	if !c.leaderElect {
		s.leader.Store(true)
		mLeader.Set(1)
		s.run(ctx)
		return
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: c.leaseName, Namespace: c.leaseNamespace},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: c.leaseName,
		LeaseDuration: c.leaseDuration, RenewDeadline: c.renewDeadline, RetryPeriod: c.retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				slog.Info("leading", "lease", c.leaseNamespace+"/"+c.leaseName, "identity", c.identity)
				s.leader.Store(true)
				mLeader.Set(1)
				s.run(ctx)
			},
			OnStoppedLeading: func() {
				mLeader.Set(0)
				s.leader.Store(false)
				if ctx.Err() == nil {
					slog.Error("lost the lease; exiting so that a restart rejoins the election")
					os.Exit(1)
				}
			},
			OnNewLeader: func(id string) {
				if id != c.identity {
					slog.Info("another replica leads", "leader", id)
				}
			},
		},
	})
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "placer-k8s-scheduler: "+format+"\n", a...)
	os.Exit(2)
}

type assumed struct {
	pod  *corev1.Pod // with Spec.NodeName set to where it is being bound
	when time.Time
}

type scheduler struct {
	cfg                     config
	cs                      kubernetes.Interface
	dyn                     dynamic.Interface
	pc                      *placerclient.Client
	factory                 informers.SharedInformerFactory
	pods                    listersv1.PodLister
	nodes                   listersv1.NodeLister
	podsSynced, nodesSynced cache.InformerSynced
	recorder                record.EventRecorder
	wake                    chan struct{}
	synced, leader          atomic.Bool

	mu      sync.Mutex
	assumed map[types.UID]assumed // bound by us, not yet seen bound by the informer
	// --evict: victims whose eviction was refused (not victims again until
	// then), and the pending pods whose victims were evicted, waiting for
	// them to be gone (they are held out of the rounds until then).
	refused      map[types.UID]refusal
	preempting   map[types.UID][]victim
	lastErr      string // the last cycle's trouble with Placer, for /readyz's body
	lastOK       time.Time
	lastUnplaced int
}

func newScheduler(c config, cs kubernetes.Interface, dyn dynamic.Interface, pc *placerclient.Client) *scheduler {
	f := informers.NewSharedInformerFactory(cs, 0)
	s := &scheduler{cfg: c, cs: cs, dyn: dyn, pc: pc, factory: f, wake: make(chan struct{}, 1), assumed: map[types.UID]assumed{},
		refused: map[types.UID]refusal{}, preempting: map[types.UID][]victim{}}
	pi, ni := f.Core().V1().Pods(), f.Core().V1().Nodes()
	s.pods, s.nodes = pi.Lister(), ni.Lister()
	s.podsSynced, s.nodesSynced = pi.Informer().HasSynced, ni.Informer().HasSynced
	poke := func() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	_, _ = pi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok && s.ours(p) {
				poke()
			}
		},
		UpdateFunc: func(_, o any) {
			p, ok := o.(*corev1.Pod)
			if !ok {
				return
			}
			if p.Spec.NodeName != "" {
				s.mu.Lock()
				delete(s.assumed, p.UID)
				delete(s.preempting, p.UID)
				s.mu.Unlock()
			}
		},
		DeleteFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok {
				s.mu.Lock()
				delete(s.assumed, p.UID)
				delete(s.preempting, p.UID)
				delete(s.refused, p.UID)
				s.mu.Unlock()
				if translate.Bound(p) {
					poke() // its node has room again
				}
			}
		},
	})
	_, _ = ni.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) {},
	})
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	s.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: c.schedulerName})
	return s
}

func (s *scheduler) ours(p *corev1.Pod) bool {
	return p.Spec.SchedulerName == s.cfg.schedulerName && p.Spec.NodeName == "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func (s *scheduler) serveHTTP(addr string) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		body := map[string]any{"synced": s.synced.Load(), "leader": s.leader.Load(), "placer_error": s.lastErr}
		if !s.lastOK.IsZero() {
			body["last_round_ok"] = s.lastOK.UTC().Format(time.RFC3339)
		}
		s.mu.Unlock()
		if !s.synced.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fail("--http %s: %v", addr, err)
	}
	slog.Info("http", "addr", ln.Addr().String())
	go func() { _ = http.Serve(ln, mux) }()
}

// run: a cycle after a pod arrives (and the batch window), and every retry interval while pods wait.
func (s *scheduler) run(ctx context.Context) {
	tick := time.NewTicker(s.cfg.retry)
	defer tick.Stop()
	s.cycle(ctx) // whatever waited while no replica led
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.window):
			}
		case <-tick.C:
		}
		s.cycle(ctx)
	}
}

func (s *scheduler) pending() (pending, bound []*corev1.Pod) {
	all, _ := s.pods.List(labels.Everything())
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, a := range s.assumed {
		if time.Since(a.when) > 2*time.Minute { // the informer would have shown it by now
			delete(s.assumed, uid)
		}
	}
	for _, p := range all {
		if a, ok := s.assumed[p.UID]; ok && p.Spec.NodeName == "" {
			bound = append(bound, a.pod)
			continue
		}
		if translate.Bound(p) {
			bound = append(bound, p)
		} else if s.ours(p) {
			pending = append(pending, p)
		}
	}
	// The oldest first, at most --batch-max (whole pod groups kept together).
	sort.SliceStable(pending, func(i, j int) bool {
		a, b := pending[i], pending[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	if len(pending) > s.cfg.batchMax {
		keep := pending[:s.cfg.batchMax]
		groups := map[string]bool{}
		for _, p := range keep {
			if g := translate.GroupKey(p); g != "" {
				groups[g] = true
			}
		}
		for _, p := range pending[s.cfg.batchMax:] {
			if g := translate.GroupKey(p); g != "" && groups[g] {
				keep = append(keep, p)
			}
		}
		pending = keep
	}
	return pending, bound
}

func (s *scheduler) minMember(ctx context.Context) translate.PodGroupMin {
	seen := map[string]int{}
	return func(ns, name string) (int, bool) {
		if v, ok := seen[ns+"/"+name]; ok {
			return v, v > 0
		}
		u, err := s.dyn.Resource(podGroupGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		v := 0
		if err == nil {
			if m, found, _ := unstructuredInt(u.Object, "spec", "minMember"); found {
				v = int(m)
			}
		} else if !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "could not find the requested resource") {
			slog.Warn("reading PodGroup", "podgroup", ns+"/"+name, "err", err)
		}
		seen[ns+"/"+name] = v
		return v, v > 0
	}
}

// nativeGroups reads the native PodGroups (scheduling.k8s.io/v1beta1, the
// Workload API) that pending pods name in spec.schedulingGroup, once a cycle each.
func (s *scheduler) nativeGroups(ctx context.Context) func(ns, name string) translate.NativeGroup {
	seen := map[string]translate.NativeGroup{}
	return func(ns, name string) translate.NativeGroup {
		if v, ok := seen[ns+"/"+name]; ok {
			return v
		}
		var v translate.NativeGroup
		pg, err := s.cs.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			v.Found = true
			if g := pg.Spec.SchedulingPolicy.Gang; g != nil {
				v.Gang, v.MinCount = true, int(g.MinCount)
			}
			if c := pg.Spec.SchedulingConstraints; c != nil {
				for _, t := range c.Topology {
					v.Topology = append(v.Topology, t.Key)
				}
			}
		case apierrors.IsNotFound(err) && notFoundIsTheObject(err, name):
		default:
			v.Err = "reading it: " + err.Error()
			if apierrors.IsNotFound(err) {
				v.Err = "the API server does not serve scheduling.k8s.io/v1beta1 podgroups (feature gate GenericWorkload, runtime-config scheduling.k8s.io/v1beta1)"
			}
			slog.Warn("reading a native PodGroup", "podgroup", ns+"/"+name, "err", err)
		}
		seen[ns+"/"+name] = v
		return v
	}
}

// notFoundIsTheObject: a 404 for the object itself, not for a resource the server does not serve.
func notFoundIsTheObject(err error, name string) bool {
	st, ok := err.(apierrors.APIStatus)
	return ok && st.Status().Details != nil && st.Status().Details.Name == name
}

func unstructuredInt(o map[string]any, path ...string) (int64, bool, error) {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		cur, ok = m[p]
		if !ok {
			return 0, false, nil
		}
	}
	switch v := cur.(type) {
	case int64:
		return v, true, nil
	case float64:
		return int64(v), true, nil
	}
	return 0, false, nil
}

func (s *scheduler) cycle(ctx context.Context) {
	start := time.Now()
	pending, bound := s.pending()
	mPending.Set(float64(len(pending)))
	if len(pending) == 0 {
		return
	}
	nodes, _ := s.nodes.List(labels.Everything())
	opt := translate.Options{RackLabel: s.cfg.rackLabel, Stacking: s.cfg.stacking, PodGroup: s.nativeGroups(ctx)}
	if s.cfg.evict {
		opt.Evict, opt.NotEvictable, opt.Wait = true, s.notEvictable, s.waitForVictims(bound)
	}
	r := translate.Build(nodes, bound, pending, s.minMember(ctx), opt, time.Now().Unix())
	for _, sk := range r.Skipped {
		s.unschedulable(ctx, sk.Pod, sk.Reason, "placer: "+sk.Why)
	}
	if len(r.Request.Pending) == 0 {
		mUnsched.Set(float64(len(r.Skipped)))
		return
	}
	t0 := time.Now()
	reply, err := s.pc.Solve(r.Request)
	mRoundSec.Observe(time.Since(t0).Seconds())
	// A round Placer refuses for one job's sake ("pending job N (...): ...")
	// goes again without that job, which is reported on its pods: one pod
	// never holds up the round. At most a few times.
	for tries := 0; err == nil && reply.Code == wire.ErrorCodeInvalidArgument && tries < 5; tries++ {
		m := refusedJob.FindStringSubmatch(reply.Message)
		if m == nil {
			break
		}
		j, _ := strconv.Atoi(m[1])
		if j >= len(r.Groups) {
			break
		}
		for _, p := range r.Groups[j].Pods {
			s.unschedulable(ctx, p, "SchedulerError", "placer: the Placer service refused this pod: "+reply.Message)
		}
		r.Drop(j, reply.Message)
		if len(r.Request.Pending) == 0 {
			return
		}
		reply, err = s.pc.Solve(r.Request)
	}
	if err != nil || reply.Code != wire.ErrorCodeOk {
		why, result := "", "placer_unavailable"
		if err != nil {
			why = fmt.Sprintf("placer: the Placer service did not answer (%v); pods wait and are tried again every %v", err, s.cfg.retry)
		} else {
			result = "placer_refused"
			why = fmt.Sprintf("placer: the Placer service refused the round (%s: %s); tried again every %v",
				wire.EnumNamesErrorCode[reply.Code], reply.Message, s.cfg.retry)
		}
		mCycles.WithLabelValues(result).Inc()
		s.mu.Lock()
		s.lastErr = why
		s.mu.Unlock()
		slog.Warn("cycle without placements", "pending", len(pending), "why", why)
		for _, g := range r.Groups {
			for _, p := range g.Pods {
				s.unschedulable(ctx, p, "SchedulerError", why)
			}
		}
		return
	}
	mCycles.WithLabelValues("ok").Inc()
	s.mu.Lock()
	s.lastErr, s.lastOK = "", time.Now()
	s.mu.Unlock()
	res := reply.Result
	type bind struct {
		pod   *corev1.Pod
		node  string
		share int // a GPU share's GPU index (placer.io/gpu-index), -1 for none
	}
	var binds []bind
	placed := map[int]bool{}
	// Preemptions (--evict): carried out first; no placement on a node
	// that had a victim this round is bound in it (the victims leave first,
	// or stay when their eviction is refused).
	held, preemptors := map[string]bool{}, map[int]bool{}
	if len(res.Preemptions) > 0 {
		held, preemptors = s.preempt(ctx, r, res)
	}
	deferred := 0
	for _, pl := range res.Placements {
		if int(pl.Job) >= len(r.Groups) {
			slog.Error("placement for an unknown job index", "job", pl.Job)
			continue
		}
		g := r.Groups[pl.Job]
		if len(pl.Replicas) != len(g.Pods) { // never for a gang (all or none); elastic is off
			slog.Error("placement with a replica count that is not the group's", "group", g.Key, "replicas", len(pl.Replicas), "pods", len(g.Pods))
			continue
		}
		placed[int(pl.Job)] = true
		onHeld := preemptors[int(pl.Job)]
		for _, rp := range pl.Replicas {
			if int(rp.Node) < len(r.Nodes) && held[r.Nodes[rp.Node].Name] {
				onHeld = true
			}
		}
		if onHeld { // a group whole or not at all: placed again next cycle
			deferred += len(g.Pods)
			continue
		}
		for i, rp := range pl.Replicas {
			if int(rp.Node) >= len(r.Nodes) {
				slog.Error("placement on an unknown node index", "node", rp.Node)
				continue
			}
			b := bind{g.Pods[i], r.Nodes[rp.Node].Name, -1}
			if m, _ := translate.Share(g.Pods[i]); m > 0 && len(rp.Gpus) == 1 {
				b.share = int(rp.Gpus[0])
			}
			binds = append(binds, b)
		}
	}
	// Assume all first, so that a cycle that starts before the informer
	// sees the bindings counts their requests.
	s.mu.Lock()
	for _, b := range binds {
		cp := b.pod.DeepCopy()
		cp.Spec.NodeName = b.node
		if b.share >= 0 {
			if cp.Annotations == nil {
				cp.Annotations = map[string]string{}
			}
			cp.Annotations[translate.GPUIndexAnnot] = strconv.Itoa(b.share)
		}
		s.assumed[b.pod.UID] = assumed{pod: cp, when: time.Now()}
	}
	s.mu.Unlock()
	if s.cfg.record != "" && len(binds) > 0 {
		var b strings.Builder
		for _, x := range binds {
			fmt.Fprintf(&b, "%s/%s %s\n", x.pod.Namespace, x.pod.Name, x.node)
		}
		if f, err := os.OpenFile(s.cfg.record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(b.String())
			_ = f.Close()
		} else {
			slog.Error("--record", "err", err)
		}
	}
	t1 := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.bindWorkers)
	var nBound, nFailed atomic.Int64
	for _, b := range binds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if s.cfg.bindDelay > 0 {
				time.Sleep(s.cfg.bindDelay)
			}
			var err error
			if b.share >= 0 { // the GPU of the share, for the device plugin, before the pod is bound
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, translate.GPUIndexAnnot, strconv.Itoa(b.share))
				_, err = s.cs.CoreV1().Pods(b.pod.Namespace).Patch(ctx, b.pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			}
			if err == nil {
				err = s.cs.CoreV1().Pods(b.pod.Namespace).Bind(ctx, &corev1.Binding{
					ObjectMeta: metav1.ObjectMeta{Name: b.pod.Name, Namespace: b.pod.Namespace, UID: b.pod.UID},
					Target:     corev1.ObjectReference{Kind: "Node", Name: b.node},
				}, metav1.CreateOptions{})
			}
			if err != nil {
				nFailed.Add(1)
				mBindErr.Inc()
				s.mu.Lock()
				delete(s.assumed, b.pod.UID)
				s.mu.Unlock()
				// A pod bound already (another replica, an earlier life of this
				// one) answers Conflict: it is not bound twice.
				slog.Warn("binding refused", "pod", b.pod.Namespace+"/"+b.pod.Name, "node", b.node, "err", err)
				if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					s.recorder.Eventf(b.pod, corev1.EventTypeWarning, "FailedBinding", "placer: binding to %s failed: %v", b.node, err)
				}
				return
			}
			nBound.Add(1)
			mBound.Inc()
			s.recorder.Eventf(b.pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s",
				b.pod.Namespace, b.pod.Name, b.node)
		}()
	}
	wg.Wait()
	bindTime := time.Since(t1)
	unplacedPods := len(r.Skipped)
	for _, u := range res.Unplaced {
		if int(u.Job) >= len(r.Groups) || placed[int(u.Job)] {
			continue
		}
		msg := translate.Message(u)
		for _, p := range r.Groups[u.Job].Pods {
			unplacedPods++
			s.unschedulable(ctx, p, "Unschedulable", msg)
		}
	}
	mUnsched.Set(float64(unplacedPods))
	mCycleSec.Observe(time.Since(start).Seconds())
	level := slog.LevelDebug // a cycle that changed nothing is not logged at info
	if nBound.Load() > 0 || nFailed.Load() > 0 || unplacedPods != s.lastUnplaced || len(res.Preemptions) > 0 {
		level = slog.LevelInfo
	}
	s.lastUnplaced = unplacedPods
	slog.Log(ctx, level, "cycle", "pending", len(pending), "jobs", len(r.Request.Pending), "nodes", len(r.Nodes),
		"bound", nBound.Load(), "bind_failed", nFailed.Load(), "unplaced_pods", unplacedPods, "preemptions", len(res.Preemptions), "deferred", deferred,
		"placer_ms", float64(t1.Sub(t0).Microseconds())/1000, "bind_ms", bindTime.Milliseconds(),
		"cycle_ms", time.Since(start).Milliseconds())
}

// unschedulable sets PodScheduled=False with the reason and an Event, when
// the pod does not say so already.
func (s *scheduler) unschedulable(ctx context.Context, p *corev1.Pod, reason, msg string) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == reason && c.Message == msg {
			return
		}
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": "PodScheduled", "status": "False", "reason": reason, "message": msg,
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}})
	_, err := s.cs.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		slog.Warn("setting PodScheduled", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	s.recorder.Event(p, corev1.EventTypeWarning, "FailedScheduling", msg)
}
