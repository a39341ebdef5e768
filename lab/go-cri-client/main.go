// go-cri-client: a CRI client on grpc-go, kubelet's own gRPC stack, for the
// nri-trace lab.
//
// It exists so that nri-trace's HTTP/2, HPACK and gRPC decoders see CRI
// traffic encoded exactly the way kubelet encodes it: grpc-go's HTTP/2
// transport and HPACK encoder (golang.org/x/net/http2/hpack, which indexes
// every header field), the k8s.io/cri-api generated client and its gogo
// protobuf messages. The Rust cri-driver (lab/src/bin/cri-driver.rs) uses
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
// start, deadline, outcome, retry 0), with the pod and container identity
// the Rust driver records.
//
// Usage:
//
//	go-cri-client [-socket S] -truth T [-timeout D] mix -pods N [-pause-file F] [-prefix P] [-netns] [-log-dir DIR]
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
// At the end it prints one JSON summary line on stdout. Exit status 0 when
// every call succeeded, 1 when any failed (after stopping and removing the
// pod it was working on), 2 on a usage error. Logs go to stderr.
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
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
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

// call runs f with a deadline of d and writes one truth record. ids, when
// not nil, fills sandbox / container ids from a successful response (before
// the record is written, as the Rust driver does).
func (c *client) call(method string, pod *podRef, ctr *containerRef, d time.Duration,
	f func(ctx context.Context) error, ids func()) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	startWall := wallNs()
	startMono := monoNs()
	err := f(ctx)
	endMono := monoNs()
	var out outcome
	switch {
	case err == nil:
		out = outcome{Kind: "ok"}
		if ids != nil {
			ids()
		}
	default:
		st, _ := status.FromError(err)
		if ctx.Err() == context.DeadlineExceeded {
			// Our deadline expired (grpc-go reports DeadlineExceeded).
			out = outcome{Kind: "deadline_exceeded"}
			c.deadlineExc++
		} else {
			code := int32(st.Code())
			out = outcome{Kind: "error", Code: &code, Message: strp(st.Message())}
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
		DeadlineMs: uint64(d / time.Millisecond), Outcome: out, Retry: 0,
	}); werr != nil {
		c.truthErrors++
		logf("cannot write truth record: %v", werr)
	}
	ms := float64(endMono-startMono) / 1e6
	m := c.methods[method]
	if m == nil {
		m = &methodStats{}
		c.methods[method] = m
	}
	c.calls++
	m.Calls++
	m.TotalMs += ms
	if ms > m.MaxMs {
		m.MaxMs = ms
	}
	if err != nil {
		c.failures++
		m.Failures++
		e := fmt.Errorf("%s %s failed after %.1f ms: %v", method, target(pod, ctr), ms, err)
		if c.firstError == "" {
			c.firstError = e.Error()
		}
		logf("%v", e)
		return e
	}
	return nil
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

// config: what PodSpec::to_config in lab/src/cri.rs sends.
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

// containerConfig: ContainerSpec::new(name).to_config(pod) in lab/src/cri.rs
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

// ------------------------------------------------------------------ main

func defaultSocket() string {
	lab := os.Getenv("NRI_TRACE_LAB_DIR")
	if lab == "" {
		lab = defaultLabDir
	}
	return filepath.Join(lab, "run", "containerd.sock")
}

func usage(fs *flag.FlagSet, msg string) {
	if msg != "" {
		fmt.Fprintf(os.Stderr, "go-cri-client: %s\n", msg)
	}
	fmt.Fprintf(os.Stderr, "usage: go-cri-client [-socket S] -truth T [-timeout D] mix -pods N [-pause-file F] [-prefix P] [-netns] [-log-dir DIR]\n")
	if fs != nil {
		fs.PrintDefaults()
	}
	os.Exit(2)
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
	if len(args) == 0 || args[0] != "mix" {
		usage(top, "the only subcommand is mix")
	}
	mf := flag.NewFlagSet("mix", flag.ContinueOnError)
	pods := mf.Int("pods", 1, "pods per phase (one after the other)")
	prefix := mf.String("prefix", "gomix", "pod name prefix: <prefix>-<phase>-<i>")
	pauseFile := mf.String("pause-file", "", "after phase warm, print {\"phase\":\"paused\"} and wait until this file exists")
	netns := mf.Bool("netns", false, "own network namespace on the lab's bridge CNI network (default: host network)")
	logRoot := mf.String("log-dir", "", "pod log directories go under DIR (as kubelet's /var/log/pods); default: none")
	if err := mf.Parse(args[1:]); err != nil {
		usage(nil, "")
	}
	if mf.NArg() != 0 {
		usage(mf, fmt.Sprintf("unexpected arguments: %v", mf.Args()))
	}
	if *pods < 1 {
		usage(mf, "-pods must be at least 1")
	}
	o := &mixOpts{pods: *pods, prefix: *prefix, pauseFile: *pauseFile, hostNetwork: !*netns, logRoot: *logRoot}

	tw, err := openTruth(*truthPath)
	if err != nil {
		logf("truth file: %v", err)
		os.Exit(1)
	}
	t0 := time.Now()
	c := &client{truth: tw, timeout: *timeout, methods: map[string]*methodStats{}}
	var phases []string
	var runErr error
	if fi, err := os.Stat(*socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		runErr = fmt.Errorf("cannot connect to %s: not a socket (is the lab up? lab/lab.sh up)", *socket)
	} else if conn, err := dial(*socket); err != nil {
		runErr = fmt.Errorf("cannot connect to %s: %v", *socket, err)
	} else {
		c.conn = conn
		c.rt = runtimeapi.NewRuntimeServiceClient(conn)
		c.img = runtimeapi.NewImageServiceClient(conn)
		phases, runErr = c.mix(o)
		conn.Close()
	}
	if runErr != nil && c.calls == 0 {
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
	if phases == nil {
		phases = []string{}
	}
	ok := runErr == nil && c.failures == 0 && c.truthErrors == 0
	summary := map[string]interface{}{
		"ok":                 ok,
		"grpc_go":            grpc.Version,
		"pods_per_phase":     o.pods,
		"phases":             phases,
		"host_network":       o.hostNetwork,
		"calls":              c.calls,
		"failures":           c.failures,
		"deadline_exceeded":  c.deadlineExc,
		"truth_write_errors": c.truthErrors,
		"methods":            methods,
		"ms":                 round3(float64(time.Since(t0)) / 1e6),
	}
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
