// go-cri-client: a CRI client on grpc-go, kubelet's own gRPC stack, for the
// nri-trace lab.
//
// It exists so that nri-trace's HTTP/2, HPACK and gRPC decoders see CRI
// traffic encoded exactly the way kubelet encodes it: grpc-go's HTTP/2
// transport and HPACK encoder (golang.org/x/net/http2/hpack, which indexes
// every header field), the k8s.io/cri-api generated client and its gogo
// protobuf messages. The Rust cri-driver (lab/src/bin/cri-driver/) uses
// tonic/hyper/h2 instead, a different encoder.
//
// Like kubelet it opens ONE grpc.ClientConn (one HTTP/2 connection) for the
// whole run and gives every call a deadline with context.WithTimeout, which
// grpc-go sends to the runtime as the grpc-timeout header. The deadlines
// follow kubelet's remote runtime client (k8s.io/cri-client): the runtime
// request timeout (-timeout, kubelet's --runtime-request-timeout, 2 min) for
// every call, except RunPodSandbox (twice that) and StopContainer (that plus
// the grace period).
//
// Every call appends one line to the truth file, in the format of
// Truth::Cri in lab/src/truth.rs (CLOCK_MONOTONIC start/end, CLOCK_REALTIME
// start, deadline, outcome, retry: 0, or n for the n-th retry of a
// request), with the pod and container identity the Rust driver records.
//
// Usage:
//
//	go-cri-client [-socket S] -truth T [-timeout D] mix -pods N [-pause-file F] [-prefix P] [-netns] [-log-dir DIR]
//	go-cri-client [-socket S] -truth T [-timeout D] retry [-deadline-ms 1000] [-retry-deadline-ms 240000]
//	    [-backoff-ms 250] [-max-backoff-ms 10000] [-retry-budget-secs 300] [-max-tries N]
//	    [-name goretry-0] [-attempt 0] [-netns] [-log-dir DIR]
//
// mix runs phase "warm", then (with -pause-file) prints {"phase":"paused"}
// on stdout and waits until F exists, then phase "main", on the same
// connection. Each phase: Version, Status, ImageFsInfo, ListImages,
// ImageStatus(busybox), ListPodSandbox, ListContainers, then per pod (one
// after the other): RunPodSandbox, PodSandboxStatus, CreateContainer,
// StartContainer, ContainerStatus, ListPodSandbox, ListContainers(by
// sandbox), StopContainer, ContainerStatus, RemoveContainer, StopPodSandbox,
// PodSandboxStatus, RemovePodSandbox, ListPodSandbox.
//
// retry is cri-driver's `retry` scenario (lab/src/bin/cri-driver/retry.rs, stage
// sandbox; the lab scenario cri-deadline-retry): RunPodSandbox with a
// deadline of -deadline-ms, which grpc-go enforces on the client (it resets
// the stream when it expires). A try that ran into its deadline (truth
// outcome deadline_exceeded) is retried with the SAME request (name, uid,
// attempt), as kubelet does on its next sync, after -backoff-ms doubling
// per retry up to -max-backoff-ms, with a deadline of -retry-deadline-ms;
// so is, after a timeout, containerd's "failed to reserve sandbox name ...
// is reserved for ..." (the first request is still running). When that
// sandbox is READY with the same name and attempt it is adopted (found by
// ListPodSandbox of the pod uid), as kubelet's relist would. Any other
// error, -max-tries, or no retry starting within -retry-budget-secs ends
// it. Then ListPodSandbox of the pod uid, StopPodSandbox + RemovePodSandbox
// of the sandbox (and of any other sandbox of the pod uid left behind).
//
// At the end it prints one JSON summary line on stdout. mix: exit status 0
// when every call succeeded, 1 when any failed (after stopping and removing
// the pod it was working on). retry: 0 when RunPodSandbox succeeded in the
// end and the teardown did too (its timed-out tries are expected), else 1.
// 2 on a usage error. Logs go to stderr.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The lab's images (lab/src/cri.rs PAUSE_IMAGE / BUSYBOX_IMAGE; the pause
// image is containerd's sandbox_image, never named by the client).
const (
	busyboxImage   = "localhost/nri-trace/busybox:lab"
	defaultLabDir  = "/var/lib/nri-trace-lab"
	podNamespace   = "nri-trace"
	containerName  = "c0"
	stopGraceSecs  = 2
	maxMsgSize     = 16 << 20 // kubelet's maxMsgSize
	dialTimeout    = 10 * time.Second
	pausePoll      = 20 * time.Millisecond
	pauseMaxWait   = 10 * time.Minute
	kubeAPIVersion = "0.1.0" // what kubelet sends in VersionRequest

	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
	annotRestartCount  = "io.kubernetes.container.restartCount"
)

// ------------------------------------------------------------------ clocks

func clockNs(id int32) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(%d): %v", id, err))
	}
	return uint64(ts.Sec)*1_000_000_000 + uint64(ts.Nsec)
}

func monoNs() uint64 { return clockNs(unix.CLOCK_MONOTONIC) }
func wallNs() uint64 { return clockNs(unix.CLOCK_REALTIME) }

// ------------------------------------------------------------------ truth

// podRef and containerRef are truth::PodRef / truth::ContainerRef.
type podRef struct {
	Name      string  `json:"name"`
	Namespace string  `json:"namespace"`
	UID       string  `json:"uid"`
	Attempt   uint32  `json:"attempt"`
	SandboxID *string `json:"sandbox_id,omitempty"`
}

type containerRef struct {
	Name    string  `json:"name"`
	Attempt uint32  `json:"attempt"`
	ID      *string `json:"id,omitempty"`
}

// outcome is truth::Outcome: {"kind":"ok"}, {"kind":"error","code":N,
// "message":"..."} or {"kind":"deadline_exceeded"}.
type outcome struct {
	Kind    string  `json:"kind"`
	Code    *int32  `json:"code,omitempty"`
	Message *string `json:"message,omitempty"`
}

// criTruth is truth::Truth::Cri, fields in serde's order.
type criTruth struct {
	Source      string        `json:"source"`
	Method      string        `json:"method"`
	Pod         *podRef       `json:"pod"`
	Container   *containerRef `json:"container"`
	StartMonoNs uint64        `json:"start_mono_ns"`
	EndMonoNs   uint64        `json:"end_mono_ns"`
	StartWallNs uint64        `json:"start_wall_ns"`
	DeadlineMs  uint64        `json:"deadline_ms"`
	Outcome     outcome       `json:"outcome"`
	Retry       uint32        `json:"retry"`
}

// noteTruth is truth::Truth::Note: something the client did or observed
// that no CRI record shows (the adoption of a timed-out try's sandbox).
type noteTruth struct {
	Source string `json:"source"`
	MonoNs uint64 `json:"mono_ns"`
	Text   string `json:"text"`
}

type truthWriter struct {
	mu sync.Mutex
	f  *os.File
}

func openTruth(path string) (*truthWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &truthWriter{f: f}, nil
}

// write appends one line with a single write(2), so concurrent appenders
// to the same file never interleave.
func (w *truthWriter) write(v interface{}) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode appends the newline
	enc.SetEscapeHTML(false)     // like serde_json
	if err := enc.Encode(v); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := w.f.Write(buf.Bytes())
	return err
}

// ------------------------------------------------------------------ client

type methodStats struct {
	Calls    uint64  `json:"calls"`
	Failures uint64  `json:"failures"`
	TotalMs  float64 `json:"total_ms"`
	MaxMs    float64 `json:"max_ms"`
}

type client struct {
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	img     runtimeapi.ImageServiceClient
	truth   *truthWriter
	timeout time.Duration

	calls       uint64
	failures    uint64
	deadlineExc uint64
	retries     uint64  // calls with retry > 0
	lastMs      float64 // duration of the last call
	truthErrors uint64
	methods     map[string]*methodStats
	firstError  string
}

// dial connects the way kubelet's remote runtime service does: insecure
// credentials, authority "localhost", a unix-socket context dialer, 16 MiB
// receive limit, kubelet's connect backoff. WithBlock (and the 10 s dial
// timeout) only makes a missing socket an immediate, clear error; it does not
// change what goes over the wire.
func dial(socket string) (*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	params := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	params.Backoff.BaseDelay = 100 * time.Millisecond
	params.Backoff.MaxDelay = 3 * time.Second
	return grpc.DialContext(ctx, socket,
		grpc.WithInsecure(),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
		grpc.WithConnectParams(params),
		grpc.WithBlock(),
	)
}

func strp(s string) *string { return &s }

// note writes one truth Note record; a failed write is counted, as a CRI
// record's is.
func (c *client) note(text string) {
	if err := c.truth.write(noteTruth{Source: "note", MonoNs: monoNs(), Text: text}); err != nil {
		c.truthErrors++
	}
}

// call runs f with a deadline of d and writes one truth record (retry 0).
// ids, when not nil, fills sandbox / container ids from a successful
// response (before the record is written, as the Rust driver does).
func (c *client) call(method string, pod *podRef, ctr *containerRef, d time.Duration,
	f func(ctx context.Context) error, ids func()) error {
	_, err := c.try(method, pod, ctr, d, 0, f, ids)
	return err
}

// try is call for try number retry of a request (0: the first try, n: the
// n-th retry of the same request); it also returns the recorded outcome.
func (c *client) try(method string, pod *podRef, ctr *containerRef, d time.Duration, retry uint32,
	f func(ctx context.Context) error, ids func()) (outcome, error) {
	// The clocks are read before the deadline starts, so a call that ran
	// into it has end - start >= d (classify relies on that).
	startWall := wallNs()
	startMono := monoNs()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := f(ctx)
	endMono := monoNs()
	elapsed := time.Duration(endMono - startMono)
	var out outcome
	if err == nil {
		out = outcome{Kind: "ok"}
		if ids != nil {
			ids()
		}
	} else {
		out = classify(err, elapsed, d)
		if out.Kind == "deadline_exceeded" {
			c.deadlineExc++
		}
	}
	// Copies: the record must show the identity at the time of the call.
	var p *podRef
	if pod != nil {
		cp := *pod
		p = &cp
	}
	var ct *containerRef
	if ctr != nil {
		cc := *ctr
		ct = &cc
	}
	if werr := c.truth.write(criTruth{
		Source: "cri", Method: method, Pod: p, Container: ct,
		StartMonoNs: startMono, EndMonoNs: endMono, StartWallNs: startWall,
		DeadlineMs: uint64(d / time.Millisecond), Outcome: out, Retry: retry,
	}); werr != nil {
		c.truthErrors++
		logf("cannot write truth record: %v", werr)
	}
	ms := float64(elapsed) / 1e6
	c.lastMs = ms
	m := c.methods[method]
	if m == nil {
		m = &methodStats{}
		c.methods[method] = m
	}
	c.calls++
	if retry > 0 {
		c.retries++
	}
	m.Calls++
	m.TotalMs += ms
	if ms > m.MaxMs {
		m.MaxMs = ms
	}
	if err != nil {
		c.failures++
		m.Failures++
		what := method
		if retry > 0 {
			what = fmt.Sprintf("%s (retry %d)", method, retry)
		}
		e := fmt.Errorf("%s %s failed after %.1f ms: %v", what, target(pod, ctr), ms, err)
		if c.firstError == "" {
			c.firstError = e.Error()
		}
		logf("%v", e)
		return out, e
	}
	return out, nil
}

// classify: how a failed call ended from the client's side, as classify()
// in lab/src/cri/retry.rs decides it. deadline_exceeded when our deadline
// expired: grpc-go then ends the call with DEADLINE_EXCEEDED (and resets
// the stream); a runtime that saw the propagated grpc-timeout answers the
// same. CANCELLED after the deadline counts too (tonic's way; grpc-go maps
// an RST_STREAM CANCEL to it). Anything else, or DEADLINE_EXCEEDED before
// our deadline, is the gRPC status.
func classify(err error, elapsed, d time.Duration) outcome {
	st, _ := status.FromError(err)
	expired := elapsed >= d
	switch st.Code() {
	case codes.DeadlineExceeded, codes.Canceled:
		if expired {
			return outcome{Kind: "deadline_exceeded"}
		}
	}
	code := int32(st.Code())
	return outcome{Kind: "error", Code: &code, Message: strp(st.Message())}
}

func target(pod *podRef, ctr *containerRef) string {
	s := ""
	if pod != nil {
		s = fmt.Sprintf("pod %s/%s", pod.Namespace, pod.Name)
	}
	if ctr != nil {
		if s != "" {
			s += ", "
		}
		s += "container " + ctr.Name
	}
	return s
}

func logf(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "go-cri-client: "+format+"\n", a...)
}

// ------------------------------------------------------------------ specs

// newUID: a random RFC 4122 version 4 UUID, as the API server gives pods.
func newUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

type podSpec struct {
	ref         podRef
	hostNetwork bool
	logDir      string // "" : no log directory (containerd discards output)
}

func (p *podSpec) namespaceOptions() *runtimeapi.NamespaceOption {
	netMode := runtimeapi.NamespaceMode_NODE
	if !p.hostNetwork {
		netMode = runtimeapi.NamespaceMode_POD
	}
	return &runtimeapi.NamespaceOption{
		Network: netMode,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

func (p *podSpec) labels() map[string]string {
	return map[string]string{
		labelPodName:      p.ref.Name,
		labelPodNamespace: p.ref.Namespace,
		labelPodUID:       p.ref.UID,
	}
}

// config: what PodSpec::to_config in lab/src/cri/spec.rs sends.
func (p *podSpec) config() *runtimeapi.PodSandboxConfig {
	hostname := ""
	if !p.hostNetwork {
		// kubelet: the pod name, truncated to 63 characters. Host-network
		// pods must leave it unset (they share the host's UTS namespace).
		hostname = p.ref.Name
		if len(hostname) > 63 {
			hostname = hostname[:63]
		}
		for len(hostname) > 0 && (hostname[len(hostname)-1] == '-' || hostname[len(hostname)-1] == '.') {
			hostname = hostname[:len(hostname)-1]
		}
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      p.ref.Name,
			Uid:       p.ref.UID,
			Namespace: p.ref.Namespace,
			Attempt:   p.ref.Attempt,
		},
		Hostname:     hostname,
		LogDirectory: p.logDir,
		Labels:       p.labels(),
		Annotations:  map[string]string{},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			// Empty: containerd 1.7 with cgroupfs uses /k8s.io/<id>.
			CgroupParent: "",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: p.namespaceOptions(),
				Privileged:       false,
			},
		},
	}
}

// containerConfig: ContainerSpec::new(name).to_config(pod) in lab/src/cri/spec.rs
// (busybox `sleep 3600`, attempt 0).
func (p *podSpec) containerConfig(name string) *runtimeapi.ContainerConfig {
	labels := p.labels()
	labels[labelContainerName] = name
	logPath := ""
	if p.logDir != "" {
		logPath = name + "/0.log"
	}
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name, Attempt: 0},
		Image:       &runtimeapi.ImageSpec{Image: busyboxImage},
		Command:     []string{"sleep", "3600"},
		Labels:      labels,
		Annotations: map[string]string{annotRestartCount: "0"},
		LogPath:     logPath,
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: p.namespaceOptions(),
				Privileged:       false,
			},
		},
	}
}

// ------------------------------------------------------------------ mix

type mixOpts struct {
	pods        int
	prefix      string
	pauseFile   string
	hostNetwork bool
	logRoot     string
}

// node: the calls kubelet makes about the node, not a pod.
func (c *client) node() error {
	t := c.timeout
	steps := []struct {
		m string
		f func(ctx context.Context) error
	}{
		{"Version", func(ctx context.Context) error {
			_, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{Version: kubeAPIVersion})
			return err
		}},
		{"Status", func(ctx context.Context) error {
			_, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{})
			return err
		}},
		{"ImageFsInfo", func(ctx context.Context) error {
			_, err := c.img.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			return err
		}},
		{"ListImages", func(ctx context.Context) error {
			_, err := c.img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			return err
		}},
		{"ImageStatus", func(ctx context.Context) error {
			r, err := c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}})
			if err == nil && r.Image == nil {
				logf("warning: ImageStatus: image %s not present", busyboxImage)
			}
			return err
		}},
		{"ListPodSandbox", func(ctx context.Context) error {
			_, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		}},
		{"ListContainers", func(ctx context.Context) error {
			_, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		}},
	}
	for _, s := range steps {
		if err := c.call(s.m, nil, nil, t, s.f, nil); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) listPodSandbox() error {
	return c.call("ListPodSandbox", nil, nil, c.timeout, func(ctx context.Context) error {
		_, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		return err
	}, nil)
}

// pod: one pod's lifecycle. On an error after RunPodSandbox, stops and
// removes the sandbox (the runtime removes its containers with it), as the
// Rust driver's cleanup does; those calls are recorded too.
func (c *client) pod(spec *podSpec) (err error) {
	t := c.timeout
	pod := &spec.ref
	cfg := spec.config()
	var sandboxID string
	err = c.call("RunPodSandbox", pod, nil, 2*t, func(ctx context.Context) error {
		r, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err == nil {
			sandboxID = r.PodSandboxId
		}
		return err
	}, func() { pod.SandboxID = strp(sandboxID) })
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			return
		}
		logf("cleanup of pod %s after an error", pod.Name)
		_ = c.call("StopPodSandbox", pod, nil, t, func(ctx context.Context) error {
			_, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID})
			return err
		}, nil)
		_ = c.call("RemovePodSandbox", pod, nil, t, func(ctx context.Context) error {
			_, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID})
			return err
		}, nil)
	}()
	podStatus := func() error {
		return c.call("PodSandboxStatus", pod, nil, t, func(ctx context.Context) error {
			_, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
			return err
		}, nil)
	}
	if err = podStatus(); err != nil {
		return err
	}

	ctr := &containerRef{Name: containerName, Attempt: 0}
	var containerID string
	err = c.call("CreateContainer", pod, ctr, t, func(ctx context.Context) error {
		r, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId:  sandboxID,
			Config:        spec.containerConfig(containerName),
			SandboxConfig: cfg,
		})
		if err == nil {
			containerID = r.ContainerId
		}
		return err
	}, func() { ctr.ID = strp(containerID) })
	if err != nil {
		return err
	}
	ctrStatus := func() error {
		return c.call("ContainerStatus", pod, ctr, t, func(ctx context.Context) error {
			_, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
			return err
		}, nil)
	}
	steps := []func() error{
		func() error {
			return c.call("StartContainer", pod, ctr, t, func(ctx context.Context) error {
				_, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
				return err
			}, nil)
		},
		ctrStatus,
		c.listPodSandbox,
		func() error {
			return c.call("ListContainers", pod, nil, t, func(ctx context.Context) error {
				_, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{
					Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID},
				})
				return err
			}, nil)
		},
		func() error {
			// kubelet: the request timeout plus the grace period.
			return c.call("StopContainer", pod, ctr, t+stopGraceSecs*time.Second, func(ctx context.Context) error {
				_, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: stopGraceSecs})
				return err
			}, nil)
		},
		ctrStatus,
		func() error {
			return c.call("RemoveContainer", pod, ctr, t, func(ctx context.Context) error {
				_, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID})
				return err
			}, nil)
		},
		func() error {
			return c.call("StopPodSandbox", pod, nil, t, func(ctx context.Context) error {
				_, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID})
				return err
			}, nil)
		},
		podStatus,
	}
	for _, s := range steps {
		if err = s(); err != nil {
			return err
		}
	}
	err = c.call("RemovePodSandbox", pod, nil, t, func(ctx context.Context) error {
		_, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID})
		return err
	}, nil)
	if err != nil {
		// Removal failed: a second RemovePodSandbox in the cleanup is all
		// that is left to try (StopPodSandbox is idempotent).
		return err
	}
	return c.listPodSandbox()
}

func (c *client) phase(name string, o *mixOpts) error {
	logf("phase %s: %d pods", name, o.pods)
	if err := c.node(); err != nil {
		return err
	}
	for i := 0; i < o.pods; i++ {
		spec := &podSpec{
			ref: podRef{
				Name:      fmt.Sprintf("%s-%s-%d", o.prefix, name, i),
				Namespace: podNamespace,
				UID:       newUID(),
				Attempt:   0,
			},
			hostNetwork: o.hostNetwork,
		}
		if o.logRoot != "" {
			spec.logDir = filepath.Join(o.logRoot, fmt.Sprintf("%s_%s_%s", spec.ref.Namespace, spec.ref.Name, spec.ref.UID))
		}
		if err := c.pod(spec); err != nil {
			return err
		}
	}
	return nil
}

// waitFile polls every 20 ms until path exists.
func waitFile(path string) error {
	deadline := time.Now().Add(pauseMaxWait)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pause file %s: %v", path, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pause file %s did not appear within %v", path, pauseMaxWait)
		}
		time.Sleep(pausePoll)
	}
}

func (c *client) mix(o *mixOpts) (phases []string, err error) {
	if err := c.phase("warm", o); err != nil {
		return []string{"warm"}, err
	}
	phases = append(phases, "warm")
	if o.pauseFile != "" {
		// os.Stdout is unbuffered: one write(2), visible at once.
		if _, err := os.Stdout.Write([]byte("{\"phase\":\"paused\"}\n")); err != nil {
			return phases, fmt.Errorf("stdout: %v", err)
		}
		logf("paused: waiting for %s", o.pauseFile)
		if err := waitFile(o.pauseFile); err != nil {
			return phases, err
		}
		logf("resumed")
	}
	if err := c.phase("main", o); err != nil {
		return append(phases, "main"), err
	}
	return append(phases, "main"), nil
}

// ------------------------------------------------------------------ retry

// retryOpts: the retry subcommand, cri-driver's `retry` (stage sandbox).
type retryOpts struct {
	name        string
	attempt     uint32
	hostNetwork bool
	logRoot     string
	deadline    time.Duration // of the first try
	retryDL     time.Duration // of every retry
	backoff     time.Duration // before the first retry; doubles per retry
	maxBackoff  time.Duration
	budget      time.Duration // no retry starts later than this after the first try
	maxTries    int           // tries in all, the first included; 0: no limit
}

// backoffFor is RetryPolicy::backoff in lab/src/cri/retry.rs: the wait before
// retry number n (1 for the first retry): backoff * 2^(n-1), at most
// maxBackoff.
func (o *retryOpts) backoffFor(n int) time.Duration {
	shift := n - 1
	if shift < 0 {
		shift = 0
	}
	if shift > 30 {
		shift = 30
	}
	w := o.backoff * time.Duration(int64(1)<<uint(shift))
	if w > o.maxBackoff || w < 0 {
		w = o.maxBackoff
	}
	return w
}

// reservedFor is reserved_for() in lab/src/cri/retry.rs: the id in containerd's
// `failed to reserve sandbox name "...": name "..." is reserved for "<id>"`,
// or "".
func reservedFor(message string) string {
	const key = "is reserved for \""
	i := strings.Index(message, key)
	if i < 0 {
		return ""
	}
	rest := message[i+len(key):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// tryRecord: one RunPodSandbox try in the summary (cri-driver's "tries").
type tryRecord struct {
	Attempt    uint32  `json:"attempt"`
	Retry      uint32  `json:"retry"`
	DeadlineMs uint64  `json:"deadline_ms"`
	Ms         float64 `json:"ms"`
	Outcome    outcome `json:"outcome"`
}

type retryResult struct {
	sandboxID string
	adopted   bool
	tries     []tryRecord
	answers   []string      // distinct runtime error messages, in order
	after     []interface{} // sandboxes of the pod uid before the teardown
}

// podSandboxes: ListPodSandbox of this pod uid (recorded with the pod's
// identity, no sandbox id, as cri-driver's list_pod_sandbox_for).
func (c *client) podSandboxes(spec *podSpec) ([]*runtimeapi.PodSandbox, error) {
	ref := spec.ref
	ref.SandboxID = nil
	var items []*runtimeapi.PodSandbox
	err := c.call("ListPodSandbox", &ref, nil, c.timeout, func(ctx context.Context) error {
		r, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
			Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: spec.ref.UID}},
		})
		if err == nil {
			items = r.Items
		}
		return err
	}, nil)
	return items, err
}

// findReadySandbox: a READY sandbox of this pod uid with the same name,
// namespace and attempt (cri-driver's find_ready_sandbox), or "".
func (c *client) findReadySandbox(spec *podSpec) string {
	items, err := c.podSandboxes(spec)
	if err != nil {
		return ""
	}
	for _, s := range items {
		m := s.Metadata
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY && m != nil &&
			m.Name == spec.ref.Name && m.Namespace == spec.ref.Namespace && m.Attempt == spec.ref.Attempt {
			return s.Id
		}
	}
	return ""
}

// runPodSandboxRetried is Driver::run_pod_sandbox_with_deadline in
// lab/src/cri/driver/sandbox.rs: RunPodSandbox with a deadline of o.deadline; a try whose
// deadline expired is retried with the SAME request (name, uid, attempt)
// and a deadline of o.retryDL after a doubling backoff, as kubelet does on
// its next sync. After a timeout, containerd answers "failed to reserve
// sandbox name ..." while the first request still runs: retried too. Once
// the name is reserved for a sandbox that is READY with this name and
// attempt (a timed-out try did create it), that sandbox is adopted, as
// kubelet's relist would. Any other error ends the loop, and so does the
// budget or -max-tries.
func (c *client) runPodSandboxRetried(spec *podSpec, o *retryOpts, res *retryResult) (string, error) {
	pod := spec.ref // every try: no sandbox id yet
	cfg := spec.config()
	start := time.Now()
	var retry uint32
	tries := 0
	timedOut := false
	for {
		d := o.deadline
		if tries > 0 {
			d = o.retryDL
		}
		try := pod
		var sandboxID string
		out, err := c.try("RunPodSandbox", &try, nil, d, retry, func(ctx context.Context) error {
			r, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if err == nil {
				sandboxID = r.PodSandboxId
			}
			return err
		}, func() { try.SandboxID = strp(sandboxID) })
		tries++
		res.tries = append(res.tries, tryRecord{
			Attempt: pod.Attempt, Retry: retry, DeadlineMs: uint64(d / time.Millisecond),
			Ms: round3(c.lastMs), Outcome: out,
		})
		if err == nil {
			return sandboxID, nil
		}
		if out.Kind == "error" && out.Message != nil {
			seen := false
			for _, a := range res.answers {
				seen = seen || a == *out.Message
			}
			if !seen {
				res.answers = append(res.answers, *out.Message)
			}
		}
		reserved := out.Kind == "error" && out.Message != nil && reservedFor(*out.Message) != ""
		// An earlier try may have created the sandbox after all.
		if timedOut && reserved {
			if id := c.findReadySandbox(spec); id != "" {
				logf("pod %s: adopted sandbox %s created by a RunPodSandbox try that timed out on the client", pod.Name, id)
				// cri-driver's note (lab/src/cri/driver/sandbox.rs), word for word: the
				// scenario check tells an adoption from a try that worked.
				c.note(fmt.Sprintf("adopted sandbox %s of pod %s/%s attempt %d: created by an earlier RunPodSandbox try that timed out on the client",
					id, pod.Namespace, pod.Name, pod.Attempt))
				res.adopted = true
				return id, nil
			}
		}
		if out.Kind == "deadline_exceeded" {
			timedOut = true
		}
		// A first-try error is final; after a timeout, only the name
		// reservation is waited out.
		if !(out.Kind == "deadline_exceeded" || (timedOut && reserved)) {
			if tries > 1 {
				return "", fmt.Errorf("RunPodSandbox pod %s/%s: gave up after %d tries: %v", pod.Namespace, pod.Name, tries, err)
			}
			return "", err
		}
		wait := o.backoffFor(tries)
		if time.Since(start)+wait > o.budget {
			return "", fmt.Errorf("RunPodSandbox pod %s/%s: gave up after %d tries (no retry starts later than %v after the first try): %v",
				pod.Namespace, pod.Name, tries, o.budget, err)
		}
		if o.maxTries > 0 && tries >= o.maxTries {
			return "", fmt.Errorf("RunPodSandbox pod %s/%s: gave up after %d tries (-max-tries): %v", pod.Namespace, pod.Name, tries, err)
		}
		retry++
		logf("RunPodSandbox pod %s: retry %d in %d ms", pod.Name, retry, wait/time.Millisecond)
		time.Sleep(wait)
	}
}

// retry is cri-driver's `retry` scenario (stage sandbox): the retried
// RunPodSandbox, then ListPodSandbox of the pod uid (what the runtime holds
// for it now), StopPodSandbox + RemovePodSandbox of the sandbox it got, and
// of any other sandbox of the pod uid an earlier try left behind.
func (c *client) retry(o *retryOpts) (*retryResult, *podSpec, error) {
	spec := &podSpec{
		ref:         podRef{Name: o.name, Namespace: podNamespace, UID: newUID(), Attempt: o.attempt},
		hostNetwork: o.hostNetwork,
	}
	if o.logRoot != "" {
		spec.logDir = filepath.Join(o.logRoot, fmt.Sprintf("%s_%s_%s", spec.ref.Namespace, spec.ref.Name, spec.ref.UID))
	}
	logf("retry: RunPodSandbox of pod %s/%s with a %d ms deadline (retries: %d ms)",
		spec.ref.Namespace, spec.ref.Name, o.deadline/time.Millisecond, o.retryDL/time.Millisecond)
	res := &retryResult{}
	sid, runErr := c.runPodSandboxRetried(spec, o, res)
	res.sandboxID = sid

	var others []string
	if items, err := c.podSandboxes(spec); err == nil {
		res.after = []interface{}{}
		for _, s := range items {
			var attempt *uint32
			if s.Metadata != nil {
				a := s.Metadata.Attempt
				attempt = &a
			}
			res.after = append(res.after, map[string]interface{}{"id": s.Id, "state": s.State.String(), "attempt": attempt})
			if s.Id != sid {
				others = append(others, s.Id)
			}
		}
	}
	// force: RemovePodSandbox even when StopPodSandbox failed (cleanup).
	stopRemove := func(id string, force bool) error {
		ref := spec.ref
		ref.SandboxID = strp(id)
		err := c.call("StopPodSandbox", &ref, nil, c.timeout, func(ctx context.Context) error {
			_, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		}, nil)
		if err != nil && !force {
			return err
		}
		return c.call("RemovePodSandbox", &ref, nil, c.timeout, func(ctx context.Context) error {
			_, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		}, nil)
	}
	var teardownErr error
	if sid != "" {
		teardownErr = stopRemove(sid, false)
	}
	for _, id := range others {
		logf("removing sandbox %s left by an earlier try", id)
		_ = stopRemove(id, true)
	}
	if runErr == nil && teardownErr != nil {
		runErr = fmt.Errorf("teardown: %v", teardownErr)
	}
	return res, spec, runErr
}

// ------------------------------------------------------------------ main

func defaultSocket() string {
	lab := os.Getenv("NRI_TRACE_LAB_DIR")
	if lab == "" {
		lab = defaultLabDir
	}
	return filepath.Join(lab, "run", "containerd.sock")
}

const usageLine = "usage: go-cri-client [-socket S] -truth T [-timeout D] mix -pods N [-pause-file F] [-prefix P] [-netns] [-log-dir DIR]\n" +
	"       go-cri-client [-socket S] -truth T [-timeout D] retry [-deadline-ms MS] [-retry-deadline-ms MS] [-backoff-ms MS] [-max-backoff-ms MS] [-retry-budget-secs S] [-max-tries N] [-name P] [-attempt A] [-netns] [-log-dir DIR]\n"

func usage(fs *flag.FlagSet, msg string) {
	if msg != "" {
		fmt.Fprintf(os.Stderr, "go-cri-client: %s\n", msg)
	}
	fmt.Fprint(os.Stderr, usageLine)
	if fs != nil {
		fs.PrintDefaults()
	}
	os.Exit(2)
}

func parseMix(args []string) *mixOpts {
	mf := flag.NewFlagSet("mix", flag.ContinueOnError)
	pods := mf.Int("pods", 1, "pods per phase (one after the other)")
	prefix := mf.String("prefix", "gomix", "pod name prefix: <prefix>-<phase>-<i>")
	pauseFile := mf.String("pause-file", "", "after phase warm, print {\"phase\":\"paused\"} and wait until this file exists")
	netns := mf.Bool("netns", false, "own network namespace on the lab's bridge CNI network (default: host network)")
	logRoot := mf.String("log-dir", "", "pod log directories go under DIR (as kubelet's /var/log/pods); default: none")
	if err := mf.Parse(args); err != nil {
		usage(nil, "")
	}
	if mf.NArg() != 0 {
		usage(mf, fmt.Sprintf("unexpected arguments: %v", mf.Args()))
	}
	if *pods < 1 {
		usage(mf, "-pods must be at least 1")
	}
	return &mixOpts{pods: *pods, prefix: *prefix, pauseFile: *pauseFile, hostNetwork: !*netns, logRoot: *logRoot}
}

func parseRetry(args []string) *retryOpts {
	rf := flag.NewFlagSet("retry", flag.ContinueOnError)
	deadline := rf.Uint64("deadline-ms", 1000, "deadline of the first RunPodSandbox try (ms)")
	retryDL := rf.Uint64("retry-deadline-ms", 240000, "deadline of every retry (ms; kubelet: twice the request timeout)")
	backoffMs := rf.Uint64("backoff-ms", 250, "wait before the first retry (ms); doubles per retry")
	maxBackoff := rf.Uint64("max-backoff-ms", 10000, "longest wait between tries (ms)")
	budget := rf.Uint64("retry-budget-secs", 300, "no retry starts later than this after the first try (s)")
	maxTries := rf.Int("max-tries", 0, "RunPodSandbox tries in all, the first included (0: no limit but the budget)")
	name := rf.String("name", "goretry-0", "pod name")
	attempt := rf.Uint("attempt", 0, "sandbox attempt (the same on every try)")
	netns := rf.Bool("netns", false, "own network namespace on the lab's bridge CNI network (default: host network)")
	logRoot := rf.String("log-dir", "", "the pod log directory goes under DIR (as kubelet's /var/log/pods); default: none")
	if err := rf.Parse(args); err != nil {
		usage(nil, "")
	}
	if rf.NArg() != 0 {
		usage(rf, fmt.Sprintf("unexpected arguments: %v", rf.Args()))
	}
	switch {
	case *deadline == 0 || *retryDL == 0:
		usage(rf, "-deadline-ms and -retry-deadline-ms must be positive")
	case *maxTries < 0:
		usage(rf, "-max-tries must not be negative")
	case *name == "":
		usage(rf, "-name must not be empty")
	case *attempt > 1<<32-1:
		usage(rf, "-attempt must fit in 32 bits")
	}
	ms := func(v uint64) time.Duration { return time.Duration(v) * time.Millisecond }
	o := &retryOpts{
		name: *name, attempt: uint32(*attempt), hostNetwork: !*netns, logRoot: *logRoot,
		deadline: ms(*deadline), retryDL: ms(*retryDL), backoff: ms(*backoffMs),
		maxBackoff: ms(*maxBackoff), budget: time.Duration(*budget) * time.Second, maxTries: *maxTries,
	}
	if o.maxBackoff < o.backoff {
		o.maxBackoff = o.backoff // as cri-driver: max(max_backoff_ms, backoff_ms)
	}
	return o
}

func main() {
	top := flag.NewFlagSet("go-cri-client", flag.ContinueOnError)
	socket := top.String("socket", defaultSocket(), "CRI socket ($NRI_TRACE_LAB_DIR/run/containerd.sock)")
	truthPath := top.String("truth", "", "truth file (NDJSON, appended): one Truth::Cri record per call")
	timeout := top.Duration("timeout", 2*time.Minute, "kubelet's --runtime-request-timeout (RunPodSandbox gets twice this, StopContainer this plus the grace period)")
	if err := top.Parse(os.Args[1:]); err != nil {
		usage(nil, "")
	}
	if *truthPath == "" {
		usage(top, "-truth is required")
	}
	if *timeout <= 0 {
		usage(top, "-timeout must be positive")
	}
	args := top.Args()
	if len(args) == 0 {
		usage(top, "a subcommand is required: mix or retry")
	}
	var mo *mixOpts
	var ro *retryOpts
	switch args[0] {
	case "mix":
		mo = parseMix(args[1:])
	case "retry":
		ro = parseRetry(args[1:])
	default:
		usage(top, fmt.Sprintf("unknown subcommand %q: mix or retry", args[0]))
	}

	tw, err := openTruth(*truthPath)
	if err != nil {
		logf("truth file: %v", err)
		os.Exit(1)
	}
	t0 := time.Now()
	c := &client{truth: tw, timeout: *timeout, methods: map[string]*methodStats{}}
	var phases []string
	var rres *retryResult
	var rspec *podSpec
	var runErr error
	if fi, err := os.Stat(*socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		runErr = fmt.Errorf("cannot connect to %s: not a socket (is the lab up? lab/lab.sh up)", *socket)
	} else if conn, err := dial(*socket); err != nil {
		runErr = fmt.Errorf("cannot connect to %s: %v", *socket, err)
	} else {
		c.conn = conn
		c.rt = runtimeapi.NewRuntimeServiceClient(conn)
		c.img = runtimeapi.NewImageServiceClient(conn)
		if mo != nil {
			phases, runErr = c.mix(mo)
		} else {
			rres, rspec, runErr = c.retry(ro)
		}
		conn.Close()
	}
	if runErr != nil && (c.calls == 0 || ro != nil) {
		logf("%v", runErr)
	}

	names := make([]string, 0, len(c.methods))
	for m := range c.methods {
		names = append(names, m)
	}
	sort.Strings(names)
	methods := map[string]*methodStats{}
	for _, m := range names {
		s := c.methods[m]
		s.TotalMs = round3(s.TotalMs)
		s.MaxMs = round3(s.MaxMs)
		methods[m] = s
	}
	var ok bool
	summary := map[string]interface{}{
		"grpc_go":            grpc.Version,
		"calls":              c.calls,
		"failures":           c.failures,
		"deadline_exceeded":  c.deadlineExc,
		"truth_write_errors": c.truthErrors,
		"methods":            methods,
		"ms":                 round3(float64(time.Since(t0)) / 1e6),
	}
	if mo != nil {
		if phases == nil {
			phases = []string{}
		}
		ok = runErr == nil && c.failures == 0 && c.truthErrors == 0
		summary["pods_per_phase"] = mo.pods
		summary["phases"] = phases
		summary["host_network"] = mo.hostNetwork
	} else {
		// The timed-out tries are failures by design: ok is the outcome of
		// the scenario, as in cri-driver.
		ok = runErr == nil && c.truthErrors == 0
		summary["scenario"] = "retry"
		summary["method"] = "RunPodSandbox"
		summary["retries"] = c.retries
		summary["host_network"] = ro.hostNetwork
		summary["deadline_ms"] = uint64(ro.deadline / time.Millisecond)
		summary["retry_deadline_ms"] = uint64(ro.retryDL / time.Millisecond)
		if rspec != nil {
			summary["pod"] = map[string]interface{}{"name": rspec.ref.Name, "namespace": rspec.ref.Namespace, "uid": rspec.ref.UID, "attempt": rspec.ref.Attempt}
		}
		if rres != nil {
			tries := rres.tries
			n := len(tries)
			if n > 100 {
				// Keep the line short: the truth file has every try.
				tries = append(append([]tryRecord{}, tries[:50]...), tries[n-50:]...)
			}
			if tries == nil {
				tries = []tryRecord{}
			}
			answers := rres.answers
			if answers == nil {
				answers = []string{}
			}
			var sid interface{}
			if rres.sandboxID != "" {
				sid = rres.sandboxID
			}
			summary["sandbox_id"] = sid
			summary["adopted"] = rres.adopted
			summary["tries_total"] = n
			summary["tries"] = tries
			summary["runtime_answers"] = answers
			summary["sandboxes_of_pod_after"] = rres.after
		}
		if runErr == nil && c.truthErrors > 0 {
			summary["error"] = fmt.Sprintf("%d truth record(s) could not be written", c.truthErrors)
		}
	}
	summary["ok"] = ok
	if runErr != nil {
		summary["error"] = runErr.Error()
	}
	line, _ := json.Marshal(summary) // map keys come out sorted
	os.Stdout.Write(append(line, '\n'))
	if !ok {
		os.Exit(1)
	}
}

func round3(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 3, 64), 64)
	return r
}
