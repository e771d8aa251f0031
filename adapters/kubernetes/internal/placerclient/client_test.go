package placerclient

import (
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"placer.local/kubernetes/internal/placertest"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// serve starts `placer serve` ($PLACER_BIN) on a free loopback port.
func serve(t *testing.T) string {
	ep, _ := serveCmd(t)
	return ep
}

// serveCmd is serve, with the process (to kill it).
func serveCmd(t *testing.T) (string, *exec.Cmd) { return placertest.Serve(t) }

func round(jobs ...*wire.JobT) *wire.ScheduleRequestT {
	var nodes []*wire.NodeT
	for i := 0; i < 2; i++ {
		nodes = append(nodes, &wire.NodeT{Name: fmt.Sprintf("n%d", i), GpuModel: "H100", GpuFreeMilli: []uint16{1000, 1000, 1000, 1000},
			CpuMilliCapacity: 64000, CpuMilliFree: 64000, MemoryMibCapacity: 1 << 20, MemoryMibFree: 1 << 20,
			Pool: wire.PoolShared, Healthy: true, Domain: -1})
	}
	return &wire.ScheduleRequestT{Cluster: &wire.ClusterT{Epoch: 1, Nodes: nodes}, Pending: jobs, Now: 100,
		Policy: &wire.PolicyT{Algorithm: wire.AlgorithmPlacer}}
}

func job(name string, gpus uint16, replicas uint32) *wire.JobT {
	return &wire.JobT{Name: name, Kind: wire.JobKindBatch, Replicas: replicas, TopologyLevel: -1,
		Demand: &wire.DemandT{Gpus: gpus, GpuMilli: 1000, CpuMilli: 1000, MemoryMib: 1024}}
}

func TestRoundTripPlacesAndExplains(t *testing.T) {
	c, err := New(Options{Endpoint: serve(t), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reply *Reply
	for try := 0; ; try++ { // the service may still be starting
		reply, err = c.Solve(round(job("a", 4, 2), job("b", 8, 1)))
		if err == nil || try == 10 {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if reply.Code != wire.ErrorCodeOk || len(reply.Result.Placements) != 1 || len(reply.Result.Placements[0].Replicas) != 2 {
		t.Fatalf("reply %+v", reply)
	}
	if len(reply.Result.Unplaced) != 1 || !strings.Contains(reply.Result.Unplaced[0].Detail, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu") {
		t.Errorf("unplaced: %+v", reply.Result.Unplaced)
	}
	h, err := c.Health()
	if err != nil || !h.Ready {
		t.Errorf("health %+v %v", h, err)
	}
}

// The scheduler drops a job Placer's validation names and sends the round again: the message must name it so.
func TestRefusalNamesThePendingJob(t *testing.T) {
	c, err := New(Options{Endpoint: serve(t), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := job("bad", 65, 1)
	var reply *Reply
	for try := 0; ; try++ {
		reply, err = c.Solve(round(job("ok", 1, 1), bad))
		if err == nil || try == 10 {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if reply.Code != wire.ErrorCodeInvalidArgument || !regexp.MustCompile(`pending job 1 \(`).MatchString(reply.Message) {
		t.Errorf("reply %v %q", reply.Code, reply.Message)
	}
}

func TestNoServiceIsAClearError(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	c, err := New(Options{Endpoint: ep, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Solve(round(job("a", 1, 1))); err == nil || !strings.Contains(err.Error(), "is `placer serve` running there?") {
		t.Errorf("err %v", err)
	}
	if _, err := New(Options{Endpoint: ""}); err == nil {
		t.Errorf("an empty endpoint is accepted")
	}
	if _, err := New(Options{Endpoint: ep, ServerKey: "x"}); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("a server key without a certificate: %v", err)
	}
}

// Two replicas: the one answering is killed (SIGKILL); the next round goes
// to the other and is answered once, within the timeout and a little.
func TestFailsOverToTheNextReplica(t *testing.T) {
	ea, a := serveCmd(t)
	eb := serve(t)
	c, err := New(Options{Endpoint: ea + "," + eb, Timeout: 500 * time.Millisecond, Retries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reply *Reply
	for try := 0; ; try++ { // both may still be starting
		reply, err = c.Solve(round(job("a", 4, 1)))
		if (err == nil && c.Endpoint() == ea) || try == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || reply.Code != wire.ErrorCodeOk || c.Endpoint() != ea {
		t.Fatalf("first round at %s: %v %+v", c.Endpoint(), err, reply)
	}
	_ = a.Process.Kill()
	_, _ = a.Process.Wait()
	start := time.Now()
	reply, err = c.Solve(round(job("b", 4, 1)))
	if err != nil || reply.Code != wire.ErrorCodeOk || len(reply.Result.Placements) != 1 {
		t.Fatalf("after the kill: %v %+v", err, reply)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the failover took %v", took)
	}
	if c.Endpoint() != eb || c.Failovers != 1 {
		t.Errorf("endpoint %s, %d failovers; want %s, 1", c.Endpoint(), c.Failovers, eb)
	}
	if _, err := New(Options{Endpoint: ea + ",," + eb}); err == nil || !strings.Contains(err.Error(), "empty entry") {
		t.Errorf("an empty entry: %v", err)
	}
}
