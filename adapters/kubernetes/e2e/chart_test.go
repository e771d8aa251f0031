package e2e

// The Helm chart (deploy/helm/placer): rendered, it is the kustomization of
// deploy/kubernetes object for object; installed into a live apiserver with
// helm itself, its workloads run as their manifests say (a process per
// pod, the container's arguments and environment, the Secrets' files) and
// bind pods; upgraded under load, no pod is lost and none bound twice.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/kyaml/kio"
)

const chartDir = "deploy/helm/placer"

// helmBinary: scripts/helm.sh's helm (on PATH, or built once from the Go
// module proxy into the cache).
func helmBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "scripts/helm.sh")).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("scripts/helm.sh: %v\n%s", err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// runHelm runs helm with its homes in the test's directory (nothing
// written under $HOME), returning its standard output.
func runHelm(t *testing.T, helm string, args ...string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm, args...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache",
		"HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// renderChart: the objects `helm template` renders (the release "placer"
// in namespace ns), read as kustomize reads YAML.
func renderChart(t *testing.T, helm, ns string, args ...string) []manifest {
	t.Helper()
	out := runHelm(t, helm, append([]string{"template", "placer", chartDir, "--namespace", ns}, args...)...)
	return yamlObjects(t, "helm template", out)
}

func yamlObjects(t *testing.T, from string, b []byte) []manifest {
	t.Helper()
	nodes, err := kio.FromBytes(b)
	if err != nil {
		t.Fatalf("%s: %v", from, err)
	}
	var objs []manifest
	for _, n := range nodes {
		j, err := n.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("%s: %v", from, err)
		}
		u.Object = jsonInts(u.Object).(map[string]any)
		a := u.GetAnnotations()
		file := a["config.kubernetes.io/path"]
		for _, k := range []string{"config.kubernetes.io/path", "config.kubernetes.io/index", "internal.config.kubernetes.io/path",
			"internal.config.kubernetes.io/index", "internal.config.kubernetes.io/seqindent"} {
			delete(a, k)
		}
		if len(a) == 0 {
			a = nil
		}
		u.SetAnnotations(a)
		objs = append(objs, manifest{file: from + " " + file, obj: u})
	}
	return objs
}

func objectKey(u *unstructured.Unstructured) string {
	k := u.GetKind() + " " + u.GetName()
	if ns := u.GetNamespace(); ns != "" {
		k = u.GetKind() + " " + ns + "/" + u.GetName()
	}
	return k
}

// The labels Helm's conventions add to every object of the chart.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart"}

// sameObjects: want (the raw manifests) and got (the chart) hold the same
// objects, field for field; the chart's labels may add Helm's and any the
// manifest's object lacks, never drop or change one.
func sameObjects(t *testing.T, want, got []manifest) {
	t.Helper()
	byKey := map[string]*unstructured.Unstructured{}
	for _, m := range got {
		byKey[objectKey(m.obj)] = m.obj
	}
	var missing []string
	for _, m := range want {
		k := objectKey(m.obj)
		g := byKey[k]
		if g == nil {
			missing = append(missing, k)
			continue
		}
		delete(byKey, k)
		gl := g.GetLabels()
		for lk, lv := range m.obj.GetLabels() {
			if gl[lk] != lv {
				t.Errorf("%s: label %s=%q in the manifest, %q in the chart", k, lk, lv, gl[lk])
			}
		}
		for _, h := range helmLabels {
			if gl[h] == "" {
				t.Errorf("%s: no %s label in the chart", k, h)
			}
		}
		a, b := m.obj.DeepCopy(), g.DeepCopy()
		unstructured.RemoveNestedField(a.Object, "metadata", "labels")
		unstructured.RemoveNestedField(b.Object, "metadata", "labels")
		if !reflect.DeepEqual(a.Object, b.Object) {
			aj, _ := a.MarshalJSON()
			bj, _ := b.MarshalJSON()
			t.Errorf("%s differs:\n manifest: %s\n chart:    %s", k, aj, bj)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the chart lacks %v", missing)
	}
	for k := range byKey {
		t.Errorf("the chart renders %s, which deploy/kubernetes lacks", k)
	}
}

// The chart, rendered with the values that match deploy/kubernetes (the
// live tests' User among the RBAC subjects, the ServiceMonitor's API
// served), is the kustomization's output; with --evict, plus
// scheduler-rbac-evict.yaml; its version is the project's; lint is clean;
// a second namespace and a third replica reach the scheduler's endpoints.
func TestChartMatchesManifests(t *testing.T) {
	helm := helmBinary(t)
	cm, err := os.ReadFile(filepath.Join(repoRoot(), "CMakeLists.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ver := regexp.MustCompile(`project\(placer VERSION ([0-9.]+)`).FindSubmatch(cm)
	chart, err := os.ReadFile(filepath.Join(repoRoot(), chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if ver == nil || !strings.Contains(string(chart), "\nversion: "+string(ver[1])+"\n") ||
		!strings.Contains(string(chart), "\nappVersion: \""+string(ver[1])+"\"\n") {
		t.Fatalf("Chart.yaml's version and appVersion are not the project's version %q:\n%s", ver, chart)
	}
	kust, err := os.ReadFile(filepath.Join(repoRoot(), "deploy/kubernetes/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(kust), "newTag: "+string(ver[1])+"\n"); n != 2 {
		t.Errorf("kustomization.yaml tags %d of its 2 images with the project's version %s", n, ver[1])
	}
	runHelm(t, helm, "lint", "--strict", chartDir)
	runHelm(t, helm, "lint", "--strict", chartDir, "--set", "scheduler.evict=true,serviceMonitor.enabled=false")

	matching := []string{"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", "--set", "scheduler.rbacUsers={placer-scheduler}"}
	_, want := kustomizationObjects(t, filepath.Join(repoRoot(), "deploy/kubernetes"))
	got := renderChart(t, helm, "default", matching...)
	sameObjects(t, want, got)
	checkMonitors(t, got)

	evict, err := os.ReadFile(filepath.Join(repoRoot(), "deploy/kubernetes/scheduler-rbac-evict.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// With --evict (docs/kubernetes.md, "Evictions"): the Deployment given
	// --evict=true and scheduler-rbac-evict.yaml applied beside.
	wantEvict := yamlObjects(t, "scheduler-rbac-evict.yaml", evict)
	for _, m := range want {
		m := manifest{file: m.file, obj: m.obj.DeepCopy()}
		if m.obj.GetKind() == "Deployment" {
			ctrs, _, _ := unstructured.NestedSlice(m.obj.Object, "spec", "template", "spec", "containers")
			ctr := ctrs[0].(map[string]any)
			ctr["args"] = append(ctr["args"].([]any), "--evict=true")
			_ = unstructured.SetNestedSlice(m.obj.Object, ctrs, "spec", "template", "spec", "containers")
		}
		wantEvict = append(wantEvict, m)
	}
	sameObjects(t, wantEvict, renderChart(t, helm, "default", append(matching, "--set", "scheduler.evict=true")...))

	// Without the Prometheus Operator's API and without the test's User:
	// no ServiceMonitor, and the ServiceAccount the only subject.
	for _, m := range renderChart(t, helm, "default") {
		switch m.obj.GetKind() {
		case "ServiceMonitor":
			t.Errorf("%s rendered where monitoring.coreos.com/v1 is not served", m)
		case "ClusterRoleBinding", "RoleBinding":
			if subjects, _, _ := unstructured.NestedSlice(m.obj.Object, "subjects"); len(subjects) != 1 {
				t.Errorf("%s: subjects %v, want only the ServiceAccount", m, subjects)
			}
		}
	}

	// placer serve in another namespace, three replicas, other tags: the
	// scheduler reaches each replica there by name.
	for _, m := range renderChart(t, helm, "gpu-infra", "--set", "placer.replicas=3,placer.image.tag=v9.8.7,scheduler.image.repository=registry.example.com/placer-k8s-scheduler") {
		switch objectKey(m.obj) {
		case "StatefulSet gpu-infra/placer":
			if r, _, _ := unstructured.NestedInt64(m.obj.Object, "spec", "replicas"); r != 3 {
				t.Errorf("placer replicas %d, want 3", r)
			}
			if img := deploymentContainer(t, m.obj).Image; img != "placer:v9.8.7" {
				t.Errorf("placer image %q", img)
			}
		case "Deployment kube-system/placer-k8s-scheduler":
			ctr := deploymentContainer(t, m.obj)
			if ctr.Image != "registry.example.com/placer-k8s-scheduler:"+string(ver[1]) {
				t.Errorf("scheduler image %q", ctr.Image)
			}
			ep := flagArgs(t, expandArgs(ctr, "x", "kube-system"))["--placer-endpoint"]
			if ep != "tcp://placer-0.placer-replicas.gpu-infra.svc:5555,tcp://placer-1.placer-replicas.gpu-infra.svc:5555,"+
				"tcp://placer-2.placer-replicas.gpu-infra.svc:5555" {
				t.Errorf("the scheduler's --placer-endpoint=%q with three replicas in gpu-infra", ep)
			}
		}
	}
}

func deploymentContainer(t *testing.T, u *unstructured.Unstructured) corev1.Container {
	t.Helper()
	var spec corev1.PodSpec
	tmpl, _, _ := unstructured.NestedMap(u.Object, "spec", "template", "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &spec); err != nil || len(spec.Containers) != 1 {
		t.Fatalf("%s: pod spec %v (%d containers)", objectKey(u), err, len(spec.Containers))
	}
	return spec.Containers[0]
}

// serviceAccountKubeconfig: the admin kubeconfig with a token of the
// ServiceAccount ns/name from the TokenRequest API, as the kubelet mounts.
func (c *cluster) serviceAccountKubeconfig(ns, name string) string {
	c.t.Helper()
	tok, err := c.cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("TokenRequest for the ServiceAccount %s/%s: %v", ns, name, err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(c.dir, "admin.kubeconfig"))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.Token = tok.Status.Token
		a.ClientCertificateData, a.ClientKeyData, a.ClientCertificate, a.ClientKey = nil, nil, "", ""
	}
	path := filepath.Join(c.dir, "serviceaccount-"+name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// deleteRBACFile deletes the objects of an RBAC file applyRBACFile applied.
func (c *cluster) deleteRBACFile(file string) {
	c.t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(repoRoot(), file))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, m := range yamlObjects(c.t, file, b) {
		u := m.obj
		switch u.GetKind() {
		case "ServiceAccount":
			err = c.cs.CoreV1().ServiceAccounts(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		case "ClusterRole":
			err = c.cs.RbacV1().ClusterRoles().Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		case "ClusterRoleBinding":
			err = c.cs.RbacV1().ClusterRoleBindings().Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		case "Role":
			err = c.cs.RbacV1().Roles(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		case "RoleBinding":
			err = c.cs.RbacV1().RoleBindings(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		default:
			c.t.Fatalf("%s: unexpected kind %s", file, u.GetKind())
		}
		if err != nil {
			c.t.Fatalf("deleting %s: %v", objectKey(u), err)
		}
	}
}

// A pod of the chart's, run as a process the way a kubelet would run its
// container: the Secret volume's items as files, the container's
// environment and arguments; the cluster's names and ports mapped to
// loopback.
type chartPod struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
}

func (p *chartPod) stop(t *testing.T, sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		b, _ := os.ReadFile(p.log)
		t.Fatalf("%s did not end within 20 s of %v:\n%s", p.name, sig, b)
	}
}

// secretFiles writes the items of the pod's Secret volume `volume` into a
// directory of its own, as the kubelet mounts them.
func (c *cluster) secretFiles(spec corev1.PodSpec, volume, ns, pod string) string {
	c.t.Helper()
	dir := filepath.Join(c.dir, "volumes", pod, volume)
	for _, v := range spec.Volumes {
		if v.Name != volume || v.Secret == nil {
			continue
		}
		s, err := c.cs.CoreV1().Secrets(ns).Get(context.Background(), v.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			c.t.Fatalf("%s's volume %s: %v", pod, volume, err)
		}
		for _, it := range v.Secret.Items {
			data, ok := s.Data[it.Key]
			if !ok {
				c.t.Fatalf("Secret %s/%s has no key %s (volume %s of %s)", ns, s.Name, it.Key, volume, pod)
			}
			f := filepath.Join(dir, it.Path)
			if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
				c.t.Fatal(err)
			}
			if err := os.WriteFile(f, data, 0o600); err != nil {
				c.t.Fatal(err)
			}
		}
		return dir
	}
	c.t.Fatalf("%s has no Secret volume %s", pod, volume)
	return ""
}

func (c *cluster) runChartPod(name string, argv, env []string) *chartPod {
	c.t.Helper()
	p := &chartPod{name: name, log: filepath.Join(c.dir, "log", fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano())), done: make(chan struct{})}
	p.cmd = withTest(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	f, _ := os.Create(p.log)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	c.t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	c.t.Logf("%s: %s", name, strings.Join(argv, " "))
	return p
}

// The chart installed by helm into a live apiserver (its Secrets made
// from `placer keygen`, as docs/kubernetes.md says), its workloads run as
// the apiserver holds them: two `placer serve` replicas (the entrypoint's
// command with the StatefulSet's environment and the keys' files), two
// scheduler replicas (the Deployment's arguments, as its ServiceAccount,
// with the chart's RBAC alone). Pods are bound through them; then, while
// pods keep coming, `helm upgrade` changes both workloads and they are
// rolled as Kubernetes rolls them (the scheduler: a new replica up, then
// an old one stopped, twice; placer serve: highest ordinal first). Every
// pod is bound, once, where it was first bound; `helm uninstall` then
// removes every object.
func TestChartInstallAndUpgrade(t *testing.T) {
	helm := helmBinary(t)
	c := newCluster(t, 32, 0)
	ctx := context.Background()
	_ = c.placer.Process.Kill() // the chart's replicas serve here
	_, _ = c.placer.Process.Wait()
	c.deleteRBACFile(schedulerRBACFile) // the chart brings its own
	admin := filepath.Join(c.dir, "admin.kubeconfig")

	// The keys, as docs/kubernetes.md makes them.
	keys := filepath.Join(c.dir, "keys")
	for _, name := range []string{"server", "health", "scheduler"} {
		if out, err := exec.Command(os.Getenv("PLACER_BIN"), "keygen", "--out", keys, "--name", name).CombinedOutput(); err != nil {
			t.Fatalf("keygen: %v %s", err, out)
		}
	}
	file := func(n string) []byte {
		b, err := os.ReadFile(filepath.Join(keys, n))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mustCreate := func(s *corev1.Secret) {
		if _, err := c.cs.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "placer-keys", Namespace: "default"}, Data: map[string][]byte{
		"server.key": file("server.key"), "server.key_secret": file("server.key_secret"), "health.key": file("health.key"),
		"health.key_secret": file("health.key_secret"), "scheduler.key": file("scheduler.key")}})
	mustCreate(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "placer-scheduler-keys", Namespace: "kube-system"}, Data: map[string][]byte{
		"server.key": file("server.key"), "scheduler.key_secret": file("scheduler.key_secret")}})

	// Leader election and rounds at the live tests' pace.
	values := filepath.Join(c.dir, "values.yaml")
	writeValues := func(extra string) {
		if err := os.WriteFile(values, []byte("scheduler:\n  extraArgs: [--lease-duration=4s, --renew-deadline=3s, --retry-period=500ms, --batch-window=300ms"+
			extra+"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeValues("")
	out := runHelm(t, helm, "install", "placer", chartDir, "--namespace", "default", "--kubeconfig", admin, "-f", values)
	t.Logf("helm install:\n%s", out)

	// What the apiserver holds is what runs.
	var placers map[int]*chartPod
	placerPorts := map[int]int{}
	placerAddr := map[string]string{} // the replicas' cluster names: loopback
	runPlacer := func(i int) *chartPod {
		sts, err := c.cs.AppsV1().StatefulSets("default").Get(ctx, "placer", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := sts.Spec.Template.Spec
		ctr := spec.Containers[0]
		name := fmt.Sprintf("%s-%d", sts.Name, i)
		if placerPorts[i] == 0 {
			placerPorts[i] = freePorts(t, 1)
		}
		placerAddr[fmt.Sprintf("tcp://%s.%s.default.svc:5555", name, sts.Spec.ServiceName)] = fmt.Sprintf("tcp://127.0.0.1:%d", placerPorts[i])
		vol := c.secretFiles(spec, "keys", "default", name)
		var env []string
		for _, e := range ctr.Env {
			switch e.Name {
			case "PLACER_ENDPOINT":
				e.Value = fmt.Sprintf("tcp://127.0.0.1:%d", placerPorts[i])
			case "PLACER_HTTP":
				e.Value = fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1))
			}
			env = append(env, e.Name+"="+e.Value)
		}
		// docker/entrypoint.sh with keys in /keys.
		return c.runChartPod(name, []string{os.Getenv("PLACER_BIN"), "serve", "--endpoint", fmt.Sprintf("tcp://127.0.0.1:%d", placerPorts[i]),
			"--curve-secret", filepath.Join(vol, "server.key_secret"), "--allow-keys", filepath.Join(vol, "clients"), "--backend", "cpu"}, env)
	}
	placers = map[int]*chartPod{0: runPlacer(0), 1: runPlacer(1)}

	d, err := c.cs.AppsV1().Deployments("kube-system").Get(ctx, "placer-k8s-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saKubeconfig := c.serviceAccountKubeconfig(d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	serial := 0
	runScheduler := func() (*chartPod, map[string]string) {
		d, err := c.cs.AppsV1().Deployments("kube-system").Get(ctx, "placer-k8s-scheduler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := d.Spec.Template.Spec
		ctr := spec.Containers[0]
		serial++
		name := fmt.Sprintf("%s-%d", d.Name, serial)
		vol := c.secretFiles(spec, "keys", d.Namespace, name)
		args := expandArgs(ctr, name, d.Namespace)
		argv := []string{os.Getenv("PLACER_K8S_SCHEDULER")}
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "--placer-endpoint":
				var eps []string
				for _, ep := range strings.Split(v, ",") {
					if placerAddr[ep] == "" {
						t.Fatalf("--placer-endpoint %s: no placer replica of that name (%v)", ep, placerAddr)
					}
					eps = append(eps, placerAddr[ep])
				}
				v = strings.Join(eps, ",")
			case "--placer-server-key", "--placer-client-cert":
				v = filepath.Join(vol, strings.TrimPrefix(v, "/keys/"))
			case "--http":
				v = fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1))
			}
			argv = append(argv, k+"="+v)
		}
		argv = append(argv, "--kubeconfig="+saKubeconfig)
		return c.runChartPod(name, argv, nil), flagArgs(t, args)
	}
	s1, args := runScheduler()
	s2, _ := runScheduler()
	if args["--lease-duration"] != "4s" {
		t.Fatalf("the Deployment's arguments lack the values' extraArgs: %v", args)
	}

	ns := "charted"
	var specs []podSpec
	for i := 0; i < 24; i++ {
		specs = append(specs, podSpec{name: fmt.Sprintf("first-%02d", i), gpus: 2})
	}
	c.createPods(ns, specs...)
	c.waitBound(ns, 90*time.Second)

	// Where each pod was first bound, watched throughout.
	firstNode := map[string]string{}
	firstSeen := map[string]time.Time{}
	var moved []string
	var mu sync.Mutex
	watch := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range c.pods(ns) {
			if p.Spec.NodeName == "" {
				continue
			}
			if was, ok := firstNode[p.Name]; !ok {
				firstNode[p.Name] = p.Spec.NodeName
				firstSeen[p.Name] = time.Now()
			} else if was != p.Spec.NodeName {
				moved = append(moved, fmt.Sprintf("%s: %s -> %s", p.Name, was, p.Spec.NodeName))
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // pods keep coming, about 10 a second
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			p := c.buildPod(ns, podSpec{name: fmt.Sprintf("load-%03d", i), gpus: 1, cpu: "1"})
			if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating %s: %v", p.Name, err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			watch()
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	// The upgrade: more workers, another scheduler flag.
	time.Sleep(2 * time.Second)
	writeValues(", --bind-workers=4")
	out = runHelm(t, helm, "upgrade", "placer", chartDir, "--namespace", "default", "--kubeconfig", admin, "-f", values,
		"--set", "placer.workers=3")
	t.Logf("helm upgrade:\n%s", out)
	if st := runHelm(t, helm, "status", "placer", "--namespace", "default", "--kubeconfig", admin); !bytes.Contains(st, []byte("REVISION: 2")) {
		t.Errorf("helm status after the upgrade:\n%s", st)
	}
	// The scheduler rolled: a new replica, then an old one stopped (SIGTERM,
	// as the kubelet stops a container), twice.
	s3, args := runScheduler()
	if args["--bind-workers"] != "4" {
		t.Errorf("the upgraded Deployment's arguments: %v", args)
	}
	time.Sleep(2 * time.Second)
	s1.stop(t, syscall.SIGTERM)
	s4, _ := runScheduler()
	time.Sleep(2 * time.Second)
	s2.stop(t, syscall.SIGTERM)
	rolled := time.Now() // the last replica of the first release gone
	// placer serve rolled, highest ordinal first, each back under its name.
	for _, i := range []int{1, 0} {
		placers[i].stop(t, syscall.SIGTERM)
		placers[i] = runPlacer(i)
		time.Sleep(2 * time.Second)
	}
	sts, err := c.cs.AppsV1().StatefulSets("default").Get(ctx, "placer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	workers := ""
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "PLACER_WORKERS" {
			workers = e.Value
		}
	}
	if workers != "3" {
		t.Errorf("the upgraded StatefulSet's PLACER_WORKERS=%q, want 3", workers)
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	ps := c.waitBound(ns, 120*time.Second)
	watch()
	if len(moved) > 0 {
		t.Errorf("pods moved: %v", moved)
	}
	// Bound once: one Scheduled event each. The event is sent after the
	// binding, asynchronously (client-go's broadcaster), so it is waited
	// for a little; a replica stopped by SIGTERM writes its last ones
	// before it ends (placer-k8s-scheduler's eventSink.flush).
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range ps {
		n := c.scheduledEvents(ns, p.Name)
		for n == 0 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			n = c.scheduledEvents(ns, p.Name)
		}
		if n != 1 {
			t.Errorf("pod %s (bound %v after the roll) has %d Scheduled events, want 1", p.Name,
				firstSeen[p.Name].Sub(rolled).Round(time.Millisecond), n)
		}
	}
	t.Logf("%d pods bound through the chart's workloads, %d of them while it was upgraded and rolled", len(ps), len(ps)-len(specs))
	l, err := c.cs.CoordinationV1().Leases(d.Namespace).Get(ctx, args["--lease-name"], metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || (*l.Spec.HolderIdentity != s3.name && *l.Spec.HolderIdentity != s4.name) {
		t.Errorf("the Lease after the roll: %v %v, want one of the upgraded replicas %s, %s", l.Spec.HolderIdentity, err, s3.name, s4.name)
	}
	c.checkCapacity()
	for _, s := range []*chartPod{s3, s4} {
		if b, _ := os.ReadFile(s.log); bytes.Contains(b, []byte("forbidden")) {
			t.Errorf("%s was refused by RBAC (the chart's roles):\n%s", s.name, b)
		}
	}

	// helm uninstall takes every object it made.
	runHelm(t, helm, "uninstall", "placer", "--namespace", "default", "--kubeconfig", admin)
	if _, err := c.cs.AppsV1().Deployments("kube-system").Get(ctx, "placer-k8s-scheduler", metav1.GetOptions{}); err == nil {
		t.Error("the scheduler's Deployment is still there after helm uninstall")
	}
	if _, err := c.cs.RbacV1().ClusterRoles().Get(ctx, "placer-scheduler", metav1.GetOptions{}); err == nil {
		t.Error("the ClusterRole is still there after helm uninstall")
	}
}
