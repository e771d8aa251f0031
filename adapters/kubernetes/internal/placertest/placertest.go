// Package placertest starts a real `placer serve` for the Go tests.
package placertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
)

// Serve starts `placer serve` ($PLACER_BIN, which ctest sets; the test is
// skipped without it) on a free loopback port, on the CPU backend, and
// returns its endpoint and process (killed when the test ends).
func Serve(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	bin := os.Getenv("PLACER_BIN")
	if bin == "" {
		t.Skip("PLACER_BIN is not set (ctest sets it): no `placer serve` to talk to")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	cmd := exec.Command(bin, "serve", "--endpoint", ep, "--backend", "cpu")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return ep, cmd
}
