// Package placerclient sends one Placer round per call over ZeroMQ, as
// placer::client (service/src/client.cpp) and the Python client
// (clients/python/placer_client/client.py) do: a DEALER socket, each
// request an Envelope with file identifier "PLCR" after an empty delimiter
// frame (REQ-compatible framing), request ids counting up from 1, replies
// to other ids dropped (0 is an error about an unreadable request), the
// session secret the server issues kept and sent with every later request,
// and a fresh socket after a timeout (which drops the unanswered request).
// With a server key and a client certificate the socket speaks CURVE.
//
// Failover (issue 39): Endpoint may name several replicas, "tcp://a:5555,
// tcp://b:5555". A round with no reply in time goes to the next endpoint at
// once (every round is a full snapshot here, so nothing else is resent); a
// ResourceExhausted with a retry hint is sent again to the same endpoint
// after the hint, BusyRetries times, then to the next. Coming back to an
// endpoint that failed in the same call waits a jittered back-off; no
// attempt starts after RetryBudget.
package placerclient

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"time"

	flatbuffers "github.com/google/flatbuffers/go"
	zmq "github.com/pebbe/zmq4"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// Options configure a Client.
type Options struct {
	Endpoint   string
	Timeout    time.Duration
	Session    string // empty: a random one
	ServerKey  string // the service's public certificate file (placer keygen), with ClientCert: CURVE
	ClientCert string // this client's secret certificate file (*.key_secret)
	// Retries: rounds sent again after a loss (at least once to each other
	// endpoint). BusyRetries: a full queue asked again. RetryBudget: no
	// attempt starts after this (0: 30 s). Backoff: the first back-off
	// (0: 50 ms), doubling to 2 s, times a random factor in [0.5, 1).
	Retries     int
	BusyRetries int
	RetryBudget time.Duration
	Backoff     time.Duration
}

// Reply is the service's answer to a round: Code Ok with Result, or the
// code and message of a refusal.
type Reply struct {
	Code       wire.ErrorCode
	Message    string
	Result     *wire.ScheduleReplyT
	retryAfter time.Duration // a full queue's hint
}

// Client is one DEALER socket to a Placer service (one of its endpoints).
type Client struct {
	opt       Options
	endpoints []string
	at        int // the endpoint the socket is connected to
	Failovers int // rounds answered by another endpoint than the last one that answered
	holder    int // the endpoint that answered the last round (-1: none yet)
	sock      *zmq.Socket
	nextID    uint64
	secret    string
	curve     [3]string // server public, client public, client secret (Z85)
}

// ErrNoReply is wrapped by the error returned when the service does not answer.
var ErrNoReply = errors.New("no reply from the Placer service")

// New connects (ZeroMQ connects lazily: a service that is down is found at the first round).
func New(opt Options) (*Client, error) {
	if opt.Endpoint == "" {
		return nil, errors.New("placer endpoint is empty (e.g. tcp://127.0.0.1:5555)")
	}
	var endpoints []string
	for _, e := range strings.Split(opt.Endpoint, ",") {
		if e = strings.TrimSpace(e); e == "" {
			return nil, fmt.Errorf("placer endpoint list %q has an empty entry (e.g. tcp://10.0.0.1:5555,tcp://10.0.0.2:5555)", opt.Endpoint)
		}
		endpoints = append(endpoints, e)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Second
	}
	if opt.Retries < 0 || opt.BusyRetries < 0 || opt.RetryBudget < 0 || opt.Backoff < 0 {
		return nil, errors.New("placer client: retries, busy retries, retry budget and back-off must not be negative")
	}
	if opt.RetryBudget == 0 {
		opt.RetryBudget = 30 * time.Second
	}
	if opt.Backoff == 0 {
		opt.Backoff = 50 * time.Millisecond
	}
	if opt.Session == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		opt.Session = "k8s-scheduler-" + hex.EncodeToString(b)
	}
	c := &Client{opt: opt, nextID: 1, endpoints: endpoints, holder: -1}
	if (opt.ServerKey == "") != (opt.ClientCert == "") {
		return nil, errors.New("--placer-server-key and --placer-client-cert go together")
	}
	if opt.ServerKey != "" {
		spub, _, err := readCert(opt.ServerKey)
		if err != nil {
			return nil, err
		}
		pub, sec, err := readCert(opt.ClientCert)
		if err != nil {
			return nil, err
		}
		if sec == "" {
			return nil, fmt.Errorf("%s is a public certificate: give the *.key_secret file", opt.ClientCert)
		}
		c.curve = [3]string{spub, pub, sec}
	}
	if err := c.connect(); err != nil {
		return nil, err
	}
	return c, nil
}

// readCert reads a ZeroMQ certificate as `placer keygen` writes it.
func readCert(path string) (public, secret string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("CURVE certificate: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch strings.TrimSpace(k) {
		case "public-key":
			public = v
		case "secret-key":
			secret = v
		}
	}
	if len(public) != 40 {
		return "", "", fmt.Errorf("%s holds no valid public-key (a certificate from `placer keygen`)", path)
	}
	return public, secret, nil
}

func (c *Client) connect() error {
	if c.sock != nil {
		_ = c.sock.Close()
		c.sock = nil
	}
	s, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		return fmt.Errorf("zmq socket: %w", err)
	}
	_ = s.SetLinger(0)
	// A send waits at most the timeout for a connected peer.
	_ = s.SetSndtimeo(c.opt.Timeout)
	if c.curve[0] != "" {
		if err := s.ClientAuthCurve(c.curve[0], c.curve[1], c.curve[2]); err != nil {
			_ = s.Close()
			return fmt.Errorf("CURVE: %w", err)
		}
	}
	if err := s.Connect(c.endpoints[c.at]); err != nil {
		_ = s.Close()
		return fmt.Errorf("cannot connect to %q: %w", c.endpoints[c.at], err)
	}
	c.sock = s
	return nil
}

// Close closes the socket.
func (c *Client) Close() {
	if c.sock != nil {
		_ = c.sock.Close()
	}
}

// Endpoint is the address the next request goes to.
func (c *Client) Endpoint() string { return c.endpoints[c.at] }

// Solve sends a whole round and waits for its reply, failing over to the
// next endpoint when it is lost (see the package comment).
func (c *Client) Solve(req *wire.ScheduleRequestT) (*Reply, error) {
	maxLost := max(c.opt.Retries, len(c.endpoints)-1)
	began := time.Now()
	failed := make([]bool, len(c.endpoints))
	lost, busy, passes := 0, 0, 0
	var refused *Reply
	pastBudget := func(wait time.Duration) bool { return time.Since(began)+wait >= c.opt.RetryBudget }
	for {
		reply, err := c.solveOnce(req)
		if err == nil && reply.Code == wire.ErrorCodeResourceExhausted && reply.retryAfter > 0 {
			refused = reply
			wait := time.Duration(float64(max(reply.retryAfter, c.opt.Backoff)) * (1 + 0.5*mrand.Float64()))
			if busy < c.opt.BusyRetries && !pastBudget(wait) {
				busy++
				time.Sleep(wait)
				continue
			}
			err = fmt.Errorf("%w at %s: ResourceExhausted past %d retries: %s", ErrNoReply, c.Endpoint(), busy, reply.Message)
		}
		if err == nil {
			if c.holder >= 0 && c.holder != c.at {
				c.Failovers++
			}
			c.holder = c.at
			return reply, nil
		}
		if !errors.Is(err, ErrNoReply) {
			return nil, err
		}
		failed[c.at] = true
		busy = 0
		next := (c.at + 1) % len(c.endpoints)
		var wait time.Duration
		if failed[next] {
			wait = time.Duration(float64(min(2*time.Second, c.opt.Backoff<<min(passes, 20))) * (0.5 + 0.5*mrand.Float64()))
			passes++
		}
		if lost >= maxLost || pastBudget(wait) {
			if refused != nil {
				return refused, nil
			}
			if lost > 0 || len(c.endpoints) > 1 {
				return nil, fmt.Errorf("%w (%d rounds lost over %d endpoints)", err, lost+1, len(c.endpoints))
			}
			return nil, err
		}
		lost++
		time.Sleep(wait)
		if next != c.at {
			c.at = next
			if cerr := c.connect(); cerr != nil {
				return nil, cerr
			}
		}
	}
}

func (c *Client) solveOnce(req *wire.ScheduleRequestT) (*Reply, error) {
	body, err := c.exchange(&wire.BodyT{Type: wire.BodyScheduleRequest, Value: req})
	if err != nil {
		return nil, err
	}
	switch body.Type {
	case wire.BodyScheduleReply:
		r := body.Value.(*wire.ScheduleReplyT)
		code, msg := wire.ErrorCodeOk, ""
		if r.Status != nil {
			code, msg = r.Status.Code, r.Status.Message
		}
		return &Reply{Code: code, Message: msg, Result: r}, nil
	case wire.BodyError:
		e := body.Value.(*wire.ErrorT)
		code := e.Code
		if code == wire.ErrorCodeOk { // an Error with Ok would read as success
			code = wire.ErrorCodeInternal
		}
		return &Reply{Code: code, Message: e.Message, retryAfter: time.Duration(e.RetryAfterMs) * time.Millisecond}, nil
	}
	return nil, fmt.Errorf("unexpected reply to a round: body type %d", body.Type)
}

// Health asks the service whether it is ready, as `placer health` does.
func (c *Client) Health() (*wire.HealthReplyT, error) {
	body, err := c.exchange(&wire.BodyT{Type: wire.BodyHealthRequest, Value: &wire.HealthRequestT{}})
	if err != nil {
		return nil, err
	}
	if h, ok := body.Value.(*wire.HealthReplyT); ok && body.Type == wire.BodyHealthReply {
		return h, nil
	}
	return nil, fmt.Errorf("the service answered a health probe with body type %d", body.Type)
}

func (c *Client) exchange(body *wire.BodyT) (*wire.BodyT, error) {
	id := c.nextID
	c.nextID++
	env := &wire.EnvelopeT{
		Header: &wire.HeaderT{Version: 1, RequestId: id, Session: c.opt.Session,
			SentAtUs: uint64(time.Now().UnixMicro()), SessionSecret: c.secret},
		Body: body,
	}
	b := flatbuffers.NewBuilder(1 << 16)
	b.FinishWithFileIdentifier(env.Pack(b), []byte("PLCR"))
	deadline := time.Now().Add(c.opt.Timeout)
	if _, err := c.sock.SendMessage([]byte{}, b.FinishedBytes()); err != nil {
		_ = c.connect()
		return nil, fmt.Errorf("%w at %s: send: %v", ErrNoReply, c.Endpoint(), err)
	}
	poller := zmq.NewPoller()
	poller.Add(c.sock, zmq.POLLIN)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		polled, err := poller.Poll(left)
		if err != nil || len(polled) == 0 {
			// A fresh socket drops the unanswered request and reaches a restarted service anew.
			_ = c.connect()
			return nil, fmt.Errorf("%w at %s within %v: is `placer serve` running there? "+
				"(a CURVE service that does not list this client's key never answers)", ErrNoReply, c.Endpoint(), c.opt.Timeout)
		}
		frames, err := c.sock.RecvMessageBytes(0)
		if err != nil || len(frames) == 0 {
			continue
		}
		payload := frames[len(frames)-1]
		if len(payload) < 8 || string(payload[4:8]) != "PLCR" {
			return nil, errors.New("unreadable reply from the service: no PLCR file identifier")
		}
		var envT *wire.EnvelopeT
		if err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("unreadable reply from the service: %v", r)
				}
			}()
			envT = wire.GetRootAsEnvelope(payload, 0).UnPack()
			return nil
		}(); err != nil {
			return nil, err
		}
		var rid uint64
		if envT.Header != nil {
			rid = envT.Header.RequestId
		}
		if rid != id && rid != 0 { // a late reply to an earlier request
			continue
		}
		if envT.Header != nil && envT.Header.SessionSecret != "" {
			c.secret = envT.Header.SessionSecret
		}
		if envT.Body == nil {
			return nil, errors.New("reply from the service without a body")
		}
		return envT.Body, nil
	}
}
