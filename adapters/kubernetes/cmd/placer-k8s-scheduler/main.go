// placer-k8s-scheduler: the Placer service as the scheduler of a Kubernetes
// cluster for the pods with spec.schedulerName "placer" (docs/kubernetes.md).
//
// It watches pods, nodes, claims and pod groups through informers, gathers
// the pending pods that are not gated nor backing off into a cycle (the
// highest priority first), asks Placer over ZeroMQ where they go (in one
// round, or in a few when pod rules tie pods of the cycle together:
// internal/plan), and binds them through the Binding subresource, many at
// a time. A gang (scheduling.x-k8s.io/pod-group, or a native PodGroup) is
// bound only with at least its minMember pods placed at once. A pod that
// is not placed gets PodScheduled=False with the reason in kube-scheduler's
// words and an Event, and backs off as in kube-scheduler (1 s doubling to
// 10 s). Two replicas can run: the leader holds a Lease.
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
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"placer.local/kubernetes/internal/placerclient"
	"placer.local/kubernetes/internal/plan"
	"placer.local/kubernetes/internal/translate"
)

type config struct {
	kubeconfig, schedulerName, endpoint, serverKey, clientCert, rackLabel, httpAddr string
	draDriver                                                                       string
	topology                                                                        []string // --rack-label's labels, finest first
	leaseName, leaseNamespace, identity, record, contentType                        string
	timeout, window, retry, leaseDuration, renewDeadline, retryPeriod, bindDelay    time.Duration
	rediscover, backoff, maxBackoff                                                 time.Duration
	livezBound                                                                      time.Duration
	batchMax, bindWorkers, rounds                                                   int
	apiQPS                                                                          float64
	apiBurst                                                                        int
	leaderElect, stacking, evict, dra                                               bool
}

var (
	mCycles    = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "placer_k8s_cycles_total", Help: "Cycles that tried pods, by result (ok, placer_unavailable, placer_refused)."}, []string{"result"})
	mBound     = prometheus.NewCounter(prometheus.CounterOpts{Name: "placer_k8s_pods_bound_total", Help: "Pods bound through the Binding subresource."})
	mBindErr   = prometheus.NewCounter(prometheus.CounterOpts{Name: "placer_k8s_bind_errors_total", Help: "Bindings the API server refused."})
	mUnsched   = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_pods_unschedulable", Help: "Pending pods whose last attempt failed."})
	mPending   = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_pods_pending", Help: "Pending pods of this scheduler (not gated)."})
	mBackoff   = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_pods_backing_off", Help: "Pending pods backing off after a failed attempt."})
	mGated     = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_pods_gated", Help: "Pods of this scheduler with scheduling gates (left alone)."})
	mLeader    = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_leader", Help: "1 while this replica holds the Lease."})
	mCycleSec  = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "placer_k8s_cycle_seconds", Help: "One cycle that tried pods: rounds built, solved, binds done.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	mEvict     = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "placer_k8s_evictions_total", Help: "Evictions through the Eviction API (--evict), by result: evicted, refused (429: a PodDisruptionBudget), failed (another error), not_tried (a dry run of another victim of the same pod refused)."}, []string{"result"})
	mRoundSec  = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "placer_k8s_placer_round_seconds", Help: "The Placer rounds of one cycle, together.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	mRounds    = prometheus.NewCounter(prometheus.CounterOpts{Name: "placer_k8s_placer_rounds_total", Help: "Placer rounds (a cycle has one, or more when pod rules tie its pods together)."})
	mLatency   = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "placer_k8s_pod_scheduling_seconds", Help: "A pod's scheduling latency: from its creation (or, created before this replica started, from when it first saw the pod) to its Binding.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)})
	mRequests  = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "placer_k8s_api_requests_total", Help: "Requests to the API server, by verb and resource (watches included)."}, []string{"verb", "resource"})
	mSchedNums = prometheus.NewCounter(prometheus.CounterOpts{Name: "placer_k8s_scheduling_cycles_total", Help: "Cycles, those that tried no pod included."})
	mClaims    = prometheus.NewCounter(prometheus.CounterOpts{Name: "placer_k8s_claims_reserved_total", Help: "ResourceClaims written before a binding: allocated by this scheduler, or reserved for one more pod."})
	mClaimWait = prometheus.NewGauge(prometheus.GaugeOpts{Name: "placer_k8s_pods_waiting_for_claims", Help: "Pending pods of this scheduler whose ResourceClaims are not there yet (not created from their template, missing, being deleted)."})
)

func main() {
	var c config
	flag.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (empty: in-cluster config)")
	flag.StringVar(&c.schedulerName, "scheduler-name", "placer", "serve pods with this spec.schedulerName")
	flag.StringVar(&c.endpoint, "placer-endpoint", "tcp://127.0.0.1:5555", "the Placer service (placer serve); several replicas separated by commas: a round lost at one goes to the next")
	flag.DurationVar(&c.timeout, "placer-timeout", 5*time.Second, "wait at most this for Placer's reply")
	flag.StringVar(&c.serverKey, "placer-server-key", "", "CURVE: the service's public certificate (placer keygen)")
	flag.StringVar(&c.clientCert, "placer-client-cert", "", "CURVE: this scheduler's secret certificate (*.key_secret)")
	flag.DurationVar(&c.window, "batch-window", 200*time.Millisecond, "gather pending pods this long after the first before a cycle")
	flag.IntVar(&c.batchMax, "batch-max", 2000, "at most this many pending pods in one cycle (by priority, then the pods not tried yet, then creation; a pod group kept whole)")
	flag.IntVar(&c.rounds, "max-rounds", 16, "at most this many Placer rounds in one cycle (pods whose pod rules refer to one another go in successive rounds; the rest wait for the next cycle)")
	flag.DurationVar(&c.retry, "retry-interval", time.Second, "the loop looks at the pending pods at least this often (pods that failed back off: --pod-initial-backoff, doubling to --pod-max-backoff)")
	flag.DurationVar(&c.backoff, "pod-initial-backoff", plan.InitialBackoff, "a pod whose attempt failed is not tried again for this long, doubled after each failure in a row up to --pod-max-backoff, unless an event may let it run (a pod ends, a node, device or volume comes; kube-scheduler's podInitialBackoffSeconds)")
	flag.DurationVar(&c.maxBackoff, "pod-max-backoff", plan.MaxBackoff, "the longest back-off (kube-scheduler's podMaxBackoffSeconds)")
	flag.DurationVar(&c.rediscover, "rediscover", 30*time.Second, "while the API server does not serve coscheduling's PodGroups, Kueue's LocalQueues and ClusterQueues, the native PodGroups (scheduling.k8s.io/v1beta1) or, with --dra, resource.k8s.io/v1, ask it again this often (a CRD installed, or an API server restarted with an API on, after the scheduler); 0: only at start")
	flag.IntVar(&c.bindWorkers, "bind-workers", 64, "bindings in flight at once (16 left a 5,000-node round of 2,000 pods binding for 3-7 s on a shared 2-core control plane; 64 kept up with the pods' creation)")
	flag.Float64Var(&c.apiQPS, "kube-api-qps", 2000, "requests per second to the API server (client-go's limiter; each binding is a Binding and an Event, so at 500 the limiter held a 5,000-node cluster's bindings to about 510 a second)")
	flag.IntVar(&c.apiBurst, "kube-api-burst", 4000, "the limiter's burst")
	flag.StringVar(&c.contentType, "kube-api-content-type", "application/vnd.kubernetes.protobuf", "what the scheduler's requests and watches are encoded in (protobuf: less of the API server's CPU than JSON; application/json for a server or proxy without it)")
	flag.StringVar(&c.rackLabel, "rack-label", defaultTopology, "node labels whose values are the topology's levels, finest first, comma-separated (a gang goes in one domain of the finest level that holds it: one NVLink clique, else one rack, else one zone); a node lacking a label sits in the domains of those it has; empty: no topology")
	flag.BoolVar(&c.stacking, "stacking", true, "Placer's stacking policy (whole-GPU pods fill used nodes first)")
	flag.BoolVar(&c.dra, "dra", true, "allocate pods' ResourceClaims (dynamic resource allocation, resource.k8s.io/v1, when the API server serves it) through Kubernetes' structured allocator; off: pods with claims wait, saying so")
	flag.StringVar(&c.draDriver, "dra-gpu-driver", "gpu.nvidia.com", "the DRA driver whose devices are GPUs in Placer's round (a device of type gpu a whole GPU, of type mig a share of its GPU)")
	flag.BoolVar(&c.evict, "evict", false, "let a pending pod preempt bound pods of a lower priority: Placer chooses the victims, each evicted through the Eviction API (PodDisruptionBudgets respected; RBAC create on pods/eviction, deploy/kubernetes/scheduler-rbac-evict.yaml); off: no pod is ever evicted")
	flag.StringVar(&c.httpAddr, "http", "", "serve /metrics, /livez and /readyz on this address (e.g. 127.0.0.1:9556)")
	flag.DurationVar(&c.livezBound, "livez-bound", 2*time.Minute, "/livez fails while this replica leads and its loop has not finished a cycle for this long")
	flag.BoolVar(&c.leaderElect, "leader-elect", true, "hold a Lease so that only one replica schedules")
	flag.StringVar(&c.leaseName, "lease-name", "placer-scheduler", "the Lease's name")
	flag.StringVar(&c.leaseNamespace, "lease-namespace", "kube-system", "the Lease's namespace")
	flag.StringVar(&c.identity, "identity", "", "this replica's name in the Lease (default: host name and pid)")
	flag.DurationVar(&c.leaseDuration, "lease-duration", 15*time.Second, "leader election: lease duration")
	flag.DurationVar(&c.renewDeadline, "renew-deadline", 10*time.Second, "leader election: renew deadline")
	flag.DurationVar(&c.retryPeriod, "retry-period", 2*time.Second, "leader election: retry period")
	flag.StringVar(&c.record, "record", "", "append Placer's choice for each pod, \"namespace/name node cycle\" a line, to this file before binding it")
	flag.DurationVar(&c.bindDelay, "test-bind-delay", 0, "testing only: wait this long before each binding (widens the window in which a test kills the scheduler mid-batch)")
	flag.Parse()
	if flag.NArg() > 0 {
		fail("unexpected argument %q (flags only; see --help)", flag.Arg(0))
	}
	if c.batchMax < 1 || c.bindWorkers < 1 || c.rounds < 1 || c.window < 0 || c.retry <= 0 || c.apiQPS <= 0 || c.apiBurst < 1 || c.livezBound <= 0 ||
		c.backoff <= 0 || c.maxBackoff < c.backoff {
		fail("--batch-max, --max-rounds, --bind-workers and --kube-api-burst must be >= 1, --batch-window >= 0, --retry-interval, --livez-bound, --pod-initial-backoff and --kube-api-qps > 0, --pod-max-backoff >= --pod-initial-backoff")
	}
	topo, bad := topologyLabels(c.rackLabel)
	if bad != nil {
		fail("--rack-label: %v", bad)
	}
	c.topology = topo
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
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counting{rt} })
	cs := kubernetes.NewForConfigOrDie(rc)
	dyn := dynamic.NewForConfigOrDie(rc)
	pc, err := placerclient.New(placerclient.Options{Endpoint: c.endpoint, Timeout: c.timeout, ServerKey: c.serverKey, ClientCert: c.clientCert})
	if err != nil {
		fail("placer: %v", err)
	}
	prometheus.MustRegister(mCycles, mBound, mBindErr, mUnsched, mPending, mBackoff, mGated, mLeader, mCycleSec, mRoundSec, mRounds,
		mEvict, mLatency, mRequests, mSchedNums, mClaims, mClaimWait)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s := newScheduler(c, cs, dyn, pc)
	prometheus.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "placer_k8s_pods_waiting_for_volumes",
		Help: "Pods placed whose PersistentVolumeClaims wait to be bound on their node (a volume provisioned there, a pre-made one given them), each holding the node until then."},
		s.waitingForVolumes))
	if c.httpAddr != "" {
		s.serveHTTP(c.httpAddr)
	}
	s.start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		fail("informers did not sync")
	}
	s.ready.Store(true)
	s.syncedAt = time.Now()
	slog.Info("informers synced", "scheduler", c.schedulerName, "placer", c.endpoint, "identity", c.identity)
	// Stopped (SIGTERM, SIGINT): the last bindings' Events written first.
	defer s.sink.flush(s.events, s.recorder, 3*time.Second)
	if !c.leaderElect {
		s.lead(ctx)
		return
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: c.leaseName, Namespace: c.leaseNamespace},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
	}
	// RunOrDie returns when the context ends without waiting for
	// OnStartedLeading: the leading cycle's last bindings (and their Events)
	// are waited for here, before the deferred flush.
	var leading sync.Mutex // held while this replica leads
	defer func() {
		leading.Lock() // the leading goroutine's cycle has ended
		defer leading.Unlock()
	}()
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: c.leaseName,
		LeaseDuration: c.leaseDuration, RenewDeadline: c.renewDeadline, RetryPeriod: c.retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Lock()
				defer leading.Unlock()
				slog.Info("leading", "lease", c.leaseNamespace+"/"+c.leaseName, "identity", c.identity)
				s.lead(ctx)
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

// defaultTopology: the NVLink domain (NVIDIA's GPU feature discovery
// labels each node with its clique), the rack, the zone.
const defaultTopology = "nvidia.com/gpu.clique,placer.io/rack,topology.kubernetes.io/zone"

// topologyLabels: --rack-label's list ("" = none): label keys, each once.
func topologyLabels(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(s, ",") {
		l = strings.TrimSpace(l)
		if errs := validation.IsQualifiedName(l); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a label key: %s", l, strings.Join(errs, "; "))
		}
		if seen[l] {
			return nil, fmt.Errorf("label %q given twice", l)
		}
		seen[l] = true
		out = append(out, l)
	}
	return out, nil
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "placer-k8s-scheduler: "+format+"\n", a...)
	os.Exit(2)
}

// counting: placer_k8s_api_requests_total, by verb and resource.
type counting struct{ rt http.RoundTripper }

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := r.Method
	if r.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	mRequests.WithLabelValues(verb, resourceOf(r.URL.Path)).Inc()
	return c.rt.RoundTrip(r)
}

// resourceOf: the resource of an API path (/api/v1/namespaces/x/pods/y/binding -> pods/binding).
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		if len(parts) == 2 {
			return "namespaces"
		}
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "discovery"
	case 1, 2:
		return parts[0]
	}
	return parts[0] + "/" + parts[2]
}

type assumed struct {
	pod  *corev1.Pod // with Spec.NodeName set to where it is being bound
	when time.Time
	// provisioning: not bound yet, its claims being bound on its node (a
	// volume provisioned there, a pre-made one given them: provision),
	// which it holds until they are.
	provisioning bool
}

type scheduler struct {
	cfg     config
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	pc      *placerclient.Client
	factory informers.SharedInformerFactory
	pods    listersv1.PodLister
	nodes   listersv1.NodeLister
	pvcs    listersv1.PersistentVolumeClaimLister
	pvs     listersv1.PersistentVolumeLister
	pvClass cache.Indexer // the volumes by StorageClass (candidates)
	classes storagelisters.StorageClassLister
	// CSI drivers and the storage capacity they publish (capacity)
	drivers    storagelisters.CSIDriverLister
	capacities storagelisters.CSIStorageCapacityLister
	// the CSI drivers on each node and their attach limits, and the
	// volumes attached to each node, by node (attacher)
	csiNodes    storagelisters.CSINodeLister
	attachments cache.Indexer
	nss         listersv1.NamespaceLister
	groups      *podGroups
	claims      *claims
	kueue       *kueue
	synced      []cache.InformerSynced
	queue       *plan.Queue

	recorder      record.EventRecorder
	events        record.EventBroadcaster
	sink          *eventSink
	wake          chan struct{}
	ready, leader atomic.Bool
	syncedAt      time.Time
	beat          atomic.Int64 // unix nanos: the leader's loop last finished a cycle (or waited)
	cycles        atomic.Int64

	mu      sync.Mutex
	assumed map[types.UID]assumed // bound by us, not yet seen bound by the informer
	seen    map[types.UID]time.Time
	// --evict: victims whose eviction was refused (not victims again until
	// then), and the pending pods whose victims were evicted, waiting for
	// them to be gone (they are held out of the rounds until then).
	refused      map[types.UID]refusal
	preempting   map[types.UID][]victim
	lastErr      string // the last cycle's trouble with Placer, for /readyz's body
	lastOK       time.Time
	lastUnplaced int

	// gpusLeftOut: the last round's nodes whose GPUs it left out (warnGPUsLeftOut).
	gpusLeftOut map[string]bool
	// controlPlane: the API server's version, read at start, for the node
	// features a pod needs (translate.Options.ControlPlane).
	controlPlane *version.Version
}

// builtFor: the Kubernetes release of this scheduler's client libraries,
// the control plane's version where the API server does not say.
const builtFor = "1.37.2"

// controlPlane: the API server's version (its major, minor and patch), else builtFor.
func controlPlane(cs kubernetes.Interface) *version.Version {
	if info, err := cs.Discovery().ServerVersion(); err == nil {
		if v, err := version.ParseGeneric(info.GitVersion); err == nil {
			return v
		}
	}
	slog.Warn("the API server's version not read: the node features pods need are read for " + builtFor)
	return version.MustParseGeneric(builtFor)
}

func newScheduler(c config, cs kubernetes.Interface, dyn dynamic.Interface, pc *placerclient.Client) *scheduler {
	f := informers.NewSharedInformerFactory(cs, 0)
	s := &scheduler{cfg: c, cs: cs, dyn: dyn, pc: pc, factory: f, wake: make(chan struct{}, 1), assumed: map[types.UID]assumed{},
		seen: map[types.UID]time.Time{}, refused: map[types.UID]refusal{}, preempting: map[types.UID][]victim{}, queue: plan.NewQueue()}
	if c.backoff > 0 { // (0: kube-scheduler's, the unit tests' configs)
		s.queue.Initial, s.queue.Max = c.backoff, c.maxBackoff
	}
	pi, ni, vi, nsi := f.Core().V1().Pods(), f.Core().V1().Nodes(), f.Core().V1().PersistentVolumeClaims(), f.Core().V1().Namespaces()
	pvi, sci := f.Core().V1().PersistentVolumes(), f.Storage().V1().StorageClasses()
	csi, capi := f.Storage().V1().CSIDrivers(), f.Storage().V1().CSIStorageCapacities()
	cni, vai := f.Storage().V1().CSINodes(), f.Storage().V1().VolumeAttachments()
	s.pods, s.nodes, s.pvcs, s.pvs, s.classes, s.nss = pi.Lister(), ni.Lister(), vi.Lister(), pvi.Lister(), sci.Lister(), nsi.Lister()
	s.drivers, s.capacities, s.csiNodes = csi.Lister(), capi.Lister(), cni.Lister()
	_ = vai.Informer().AddIndexers(cache.Indexers{byNode: attachmentNode})
	s.attachments = vai.Informer().GetIndexer()
	_ = pvi.Informer().AddIndexers(cache.Indexers{byClass: func(o any) ([]string, error) {
		if pv, ok := o.(*corev1.PersistentVolume); ok {
			return []string{storagehelpers.GetPersistentVolumeClass(pv)}, nil
		}
		return nil, nil
	}})
	s.pvClass = pvi.Informer().GetIndexer()
	s.synced = []cache.InformerSynced{pi.Informer().HasSynced, ni.Informer().HasSynced, vi.Informer().HasSynced, pvi.Informer().HasSynced,
		sci.Informer().HasSynced, csi.Informer().HasSynced, capi.Informer().HasSynced, nsi.Informer().HasSynced,
		cni.Informer().HasSynced, vai.Informer().HasSynced}
	_, _ = pi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: s.podAdded, UpdateFunc: s.podUpdated, DeleteFunc: s.podDeleted})
	_, _ = ni.Informer().AddEventHandler(s.requeueOn(changedAs(nodeChanged)))
	_, _ = vi.Informer().AddEventHandler(s.requeueOn(changedAs(volumeClaimChanged)))
	_, _ = pvi.Informer().AddEventHandler(s.requeueOn(changedAs(volumeChanged)))
	_, _ = sci.Informer().AddEventHandler(s.requeueOn(nil))
	_, _ = csi.Informer().AddEventHandler(s.requeueOn(nil))
	_, _ = capi.Informer().AddEventHandler(s.requeueOn(nil))
	_, _ = cni.Informer().AddEventHandler(s.requeueOn(nil))
	// a volume detached: room under its driver's limit on its node
	_, _ = vai.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { s.roomFreed() }})
	s.groups = newPodGroups(s)
	s.claims = newClaims(s)
	s.kueue = &kueue{s: s}
	s.events = record.NewBroadcaster()
	s.sink = newEventSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	s.events.StartRecordingToSink(s.sink)
	s.recorder = s.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: c.schedulerName})
	return s
}

func (s *scheduler) podAdded(o any) {
	if p, ok := o.(*corev1.Pod); ok && s.ours(p) {
		s.mu.Lock()
		s.seen[p.UID] = time.Now()
		s.mu.Unlock()
		s.poke()
	}
}

func (s *scheduler) podUpdated(old, o any) {
	p, ok := o.(*corev1.Pod)
	q, _ := old.(*corev1.Pod)
	if !ok {
		return
	}
	if p.Spec.NodeName != "" {
		s.mu.Lock()
		delete(s.assumed, p.UID)
		delete(s.preempting, p.UID)
		s.mu.Unlock()
		s.queue.Forget(p.UID)
	}
	switch {
	case s.ours(p) && (q == nil || !s.ours(q)): // its last scheduling gate removed, say
		s.poke()
	case s.ours(p) && !resourceclaim.PodStatusEqual(q.Status.ResourceClaimStatuses, p.Status.ResourceClaimStatuses): // its claims created
		s.poke()
	case s.ours(p) && podChanged(q, p): // edited: a toleration added, an annotation changed
		s.queue.Retry(p.UID)
		s.poke()
	case q != nil && translate.Bound(q) && !translate.Bound(p): // it finished: its node has room
		s.roomFreed()
	case q != nil && translate.Bound(p) && shrunk(q, p): // resized in place, and its kubelet gave room back
		s.roomFreed()
	}
}

// shrunk: whether a bound pod holds less of some resource than it did
// (translate.Requests: a resize in place done, say).
func shrunk(q, p *corev1.Pod) bool {
	before := translate.Requests(q)
	for k, v := range translate.Requests(p) {
		if b, ok := before[k]; ok && v.Cmp(b) < 0 {
			return true
		}
	}
	return false
}

// podDeleted: a deletion, or the tombstone of one the watch missed.
func (s *scheduler) podDeleted(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	s.mu.Lock()
	delete(s.assumed, p.UID)
	delete(s.preempting, p.UID)
	delete(s.refused, p.UID)
	delete(s.seen, p.UID)
	s.mu.Unlock()
	s.queue.Forget(p.UID)
	if translate.Bound(p) {
		s.roomFreed() // its node has room again
	}
}

// nodeChanged: whether an update of a node changes what a round sees of it
// (not its heartbeats).
func nodeChanged(a, b *corev1.Node) bool {
	return !reflect.DeepEqual(a.Labels, b.Labels) || !reflect.DeepEqual(a.Spec.Taints, b.Spec.Taints) ||
		a.Spec.Unschedulable != b.Spec.Unschedulable || !reflect.DeepEqual(a.Status.Allocatable, b.Status.Allocatable) ||
		nodeReady(a) != nodeReady(b) || !slices.Equal(a.Status.DeclaredFeatures, b.Status.DeclaredFeatures)
}

// podChanged: whether an update of a pending pod changes what a round sees
// of it (its spec, labels or annotations), not its status alone (this
// scheduler's conditions among them).
func podChanged(a, b *corev1.Pod) bool {
	return !reflect.DeepEqual(a.Spec, b.Spec) || !reflect.DeepEqual(a.Labels, b.Labels) || !reflect.DeepEqual(a.Annotations, b.Annotations)
}

// volumeClaimChanged: whether an update of a PersistentVolumeClaim changes
// its spec or status (bound to its volume, say), not its metadata alone.
func volumeClaimChanged(a, b *corev1.PersistentVolumeClaim) bool {
	return !reflect.DeepEqual(a.Spec, b.Spec) || !reflect.DeepEqual(a.Status, b.Status) || claimBound(a) != claimBound(b)
}

// volumeChanged: whether an update of a PersistentVolume changes its spec
// (its node affinity, its claim) or makes it available (a pre-made volume
// released and cleaned); not its other phases.
func volumeChanged(a, b *corev1.PersistentVolume) bool {
	return !reflect.DeepEqual(a.Spec, b.Spec) || (b.Status.Phase == corev1.VolumeAvailable && a.Status.Phase != corev1.VolumeAvailable)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// requeue: a cycle now, which also tries the pods backing off (plan.Queue.Requeue).
func (s *scheduler) requeue() {
	s.queue.Requeue(time.Now())
	s.poke()
}

// roomFreed: a cycle now, which also tries the pods backing off that room
// may help (plan.Queue.RoomFreed).
func (s *scheduler) roomFreed() {
	s.queue.RoomFreed(time.Now())
	s.poke()
}

// requeueOn: informer handlers for a kind whose objects, added or changed,
// may let a pod that failed run: an add requeues, and so does an update
// that `changed` (nil: any) says may; a deletion pokes.
func (s *scheduler) requeueOn(changed func(old, o any) bool) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.requeue() },
		UpdateFunc: func(old, o any) {
			if changed == nil || changed(old, o) {
				s.requeue()
			}
		},
		DeleteFunc: func(any) { s.poke() },
	}
}

// changedAs: requeueOn's `changed` for objects of type T: f on both, true
// where either is not a T.
func changedAs[T any](f func(a, b T) bool) func(old, o any) bool {
	return func(old, o any) bool {
		a, okA := old.(T)
		b, okB := o.(T)
		return !okA || !okB || f(a, b)
	}
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scheduler) start(ctx context.Context) {
	s.controlPlane = controlPlane(s.cs)
	s.factory.Start(ctx.Done())
	s.groups.start(ctx, s.cfg.rediscover)
	s.claims.start(ctx, s.cfg.rediscover)
	s.kueue.start(ctx, s.cfg.rediscover)
}

// ours: a pod this scheduler places: its scheduler name, no node, not
// deleted or finished, and no scheduling gate left (the API server refuses
// the Binding of a gated pod).
func (s *scheduler) ours(p *corev1.Pod) bool {
	return s.mine(p) && len(p.Spec.SchedulingGates) == 0
}

// mine: ours, or ours once its gates are gone.
func (s *scheduler) mine(p *corev1.Pod) bool {
	return p.Spec.SchedulerName == s.cfg.schedulerName && p.Spec.NodeName == "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func (s *scheduler) serveHTTP(addr string) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		if s.leader.Load() {
			if since := time.Since(time.Unix(0, s.beat.Load())); since > s.cfg.livezBound {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "the leader's loop has not finished a cycle for %v (bound %v)\n", since.Round(time.Second), s.cfg.livezBound)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		body := map[string]any{"synced": s.ready.Load(), "leader": s.leader.Load(), "placer_error": s.lastErr}
		if !s.lastOK.IsZero() {
			body["last_round_ok"] = s.lastOK.UTC().Format(time.RFC3339)
		}
		s.mu.Unlock()
		if !s.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fail("--http %s: %v", addr, err)
	}
	slog.Info("http", "addr", ln.Addr().String())
	go func() { _ = probeServer(mux, 2*time.Second).Serve(ln) }()
}

// probeServer serves the probes and metrics to peers that may not be
// trusted (the pod's network): a request's head must come within
// headTimeout and at most 8 KB, the whole request within twice that, an
// answer within 10 s, and an idle kept-alive connection goes after 30 s.
// http.Serve alone sets none of these, so a peer could hold connections,
// and their memory, open for ever by sending a header line now and then.
func probeServer(h http.Handler, headTimeout time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: headTimeout, ReadTimeout: 2 * headTimeout,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 8 << 10}
}

// lead runs the loop while this replica leads.
func (s *scheduler) lead(ctx context.Context) {
	s.beat.Store(time.Now().UnixNano())
	s.leader.Store(true)
	mLeader.Set(1)
	s.run(ctx)
}

// run: a cycle after a pod arrives (and the batch window), when a pod's
// back-off ends, and at least every retry interval; at once again when a
// cycle left pods untried.
func (s *scheduler) run(ctx context.Context) {
	for {
		more, next := s.cycle(ctx)
		s.beat.Store(time.Now().UnixNano())
		wait := s.cfg.retry
		if !next.IsZero() {
			wait = max(10*time.Millisecond, min(wait, time.Until(next)))
		}
		if more {
			wait = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.wake:
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.window):
			}
		case <-t.C:
		}
	}
}
