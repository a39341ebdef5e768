// go-nri-plugin: an NRI plugin for the nri-trace lab, built on the NRI
// project's own stub library (github.com/containerd/nri/pkg/stub).
//
// The Rust nri-test-plugin (lab/src/bin/nri-test-plugin.rs) speaks NRI with
// the ttrpc crate and a multiplexer of ours; this plugin lets upstream's Go
// stub do all of it: the connection multiplexer (pkg/net/multiplex), the
// ttrpc server and client (github.com/containerd/ttrpc), RegisterPlugin,
// Configure, the (split) Synchronize, and the dispatch of every event to
// the plugin's handlers. The same source builds against two stubs:
//
//	github.com/containerd/nri v0.12.2 (go.mod)          a dedicated ttrpc method per
//	                                                    event (RunPodSandbox, ...), and
//	                                                    StateChange for older runtimes
//	github.com/containerd/nri v0.8.0 (go.v0.8.0.mod,    StateChange only: a runtime that
//	build tag nri_v080)                                 tries a per-event method first
//	                                                    gets ttrpc's Unimplemented
//
// It subscribes to events (-events), answers each at once or as -on says,
// and writes one ground-truth line per request it was sent, in the NDJSON
// format of lab/src/truth.rs (Truth::Nri, plus Truth::Plugin for its
// lifecycle), so that the lab's checks (tests/tests/nri_check) compare
// nri-trace's decoded NRI calls with it.
//
// Which ttrpc method the runtime called: the stub does not tell its
// handlers (StateChange{RUN_POD_SANDBOX} and RunPodSandbox both end in the
// plugin's RunPodSandbox). A ttrpc unary server interceptor, installed
// with stub.WithTTRPCOptions, sees the full method name of every method the
// stub serves, but a method the stub lacks is answered Unimplemented by
// ttrpc's service lookup before any interceptor runs. So the truth is
// taken from the wire: the plugin dials the runtime itself and hands the
// stub that connection wrapped (stub.WithConnection); the wrapper parses
// the multiplexer's frames and the ttrpc messages in them as they are read
// and written (wire.go). recv_mono_ns is CLOCK_MONOTONIC right after the
// read that completed the request, reply_mono_ns right after the write
// that completed the response, the outcome the status actually written.
// The interceptor marks which requests reached the stub's dispatch: only
// those carry the configured action.
//
// Usage:
//
//	go-nri-plugin -name NAME -idx NN -truth FILE [-socket PATH] [-events auto|all|old|LIST]
//	    [-on EVENT=ok|delay:MS|error:MESSAGE|adjust:PARTS ...] [-sched fifo|other] [-v]
//	go-nri-plugin -version
//
// Pre-launched (NRI_PLUGIN_SOCKET set, no -socket): the runtime's socket
// is that fd, and NRI_PLUGIN_NAME / NRI_PLUGIN_IDX name the plugin.
//
// It exits 0 when the runtime closes the connection, 1 on a setup or
// registration error, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
)

const nriModule = "github.com/containerd/nri"

// Event numbers and names as on the wire (api.proto's enum Event); the
// names are those of Truth::Nri's `event` (the Rust as_str_name).
var eventNames = [...]string{
	1:  "RUN_POD_SANDBOX",
	2:  "STOP_POD_SANDBOX",
	3:  "REMOVE_POD_SANDBOX",
	4:  "CREATE_CONTAINER",
	5:  "POST_CREATE_CONTAINER",
	6:  "START_CONTAINER",
	7:  "POST_START_CONTAINER",
	8:  "UPDATE_CONTAINER",
	9:  "POST_UPDATE_CONTAINER",
	10: "STOP_CONTAINER",
	11: "REMOVE_CONTAINER",
	12: "UPDATE_POD_SANDBOX",
	13: "POST_UPDATE_POD_SANDBOX",
	14: "VALIDATE_CONTAINER_ADJUSTMENT",
}

// The events of NRI v0.6-v0.9 (mask 0x7ff): what containerd 1.7 and 2.1
// accept; a subscription to any other event is refused there ("invalid
// plugin events").
const oldEvents = api.EventMask(0x7ff)

// The ttrpc method that carries each event (NRI v0.12 names; the older
// ones: CreateContainer, UpdateContainer, StopContainer).
var methodEvent = map[string]int32{
	"RunPodSandbox":               1,
	"StopPodSandbox":              2,
	"RemovePodSandbox":            3,
	"CreateContainer":             4,
	"PostCreateContainer":         5,
	"StartContainer":              6,
	"PostStartContainer":          7,
	"UpdateContainer":             8,
	"PostUpdateContainer":         9,
	"StopContainer":               10,
	"RemoveContainer":             11,
	"UpdatePodSandbox":            12,
	"PostUpdatePodSandbox":        13,
	"ValidateContainerAdjustment": 14,
}

func eventName(e int32) string {
	if e > 0 && int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("EVENT_%d", e)
}

func norm(s string) string {
	return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
}

func parseEvent(s string) (int32, bool) {
	n := norm(s)
	for i := 1; i < len(eventNames); i++ {
		if norm(eventNames[i]) == n {
			return int32(i), true
		}
	}
	return 0, false
}

// ---------------------------------------------------------------- actions

// action is what the plugin does with an event: Truth::Nri's `action`
// ({"kind":"ok"}, {"kind":"delay","ms":N}, {"kind":"error","message":M}).
type action struct {
	kind    string
	ms      uint64
	message string
	parts   []string // adjust: what CreateContainer's reply adjusts
}

func (a action) json() map[string]any {
	switch a.kind {
	case "delay":
		return map[string]any{"kind": "delay", "ms": a.ms}
	case "error":
		return map[string]any{"kind": "error", "message": a.message}
	case "adjust":
		return map[string]any{"kind": "adjust", "parts": a.parts}
	}
	return map[string]any{"kind": "ok"}
}

// String: the -on spelling.
func (a action) String() string {
	switch a.kind {
	case "delay":
		return fmt.Sprintf("delay:%d", a.ms)
	case "error":
		return "error:" + a.message
	case "adjust":
		return "adjust:" + strings.Join(a.parts, ",")
	}
	return "ok"
}

func parseAction(s string) (action, error) {
	switch {
	case s == "ok":
		return action{kind: "ok"}, nil
	case strings.HasPrefix(s, "delay:"):
		ms, err := strconv.ParseUint(strings.TrimPrefix(s, "delay:"), 10, 64)
		if err != nil {
			return action{}, fmt.Errorf("delay:MS: %v", err)
		}
		return action{kind: "delay", ms: ms}, nil
	case strings.HasPrefix(s, "error:"):
		return action{kind: "error", message: strings.TrimPrefix(s, "error:")}, nil
	case strings.HasPrefix(s, "adjust:"):
		parts := strings.Split(strings.TrimPrefix(s, "adjust:"), ",")
		for _, p := range parts {
			if p != "hooks" && p != "env" {
				return action{}, fmt.Errorf("adjust:PARTS: unknown part %q (hooks, env)", p)
			}
		}
		return action{kind: "adjust", parts: parts}, nil
	}
	return action{}, fmt.Errorf("unknown action %q (ok, delay:MS, error:MESSAGE, adjust:hooks,env)", s)
}

type onFlags map[int32]action

func (o onFlags) String() string { return "" }
func (o onFlags) Set(v string) error {
	t, a, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want EVENT=ACTION", v)
	}
	e, ok := parseEvent(t)
	if !ok {
		return fmt.Errorf("%q: unknown event %q", v, t)
	}
	act, err := parseAction(a)
	if err != nil {
		return fmt.Errorf("%q: %v", v, err)
	}
	o[e] = act
	return nil
}

// ---------------------------------------------------------------- the plugin

type plugin struct {
	events  string // -events
	on      onFlags
	verbose bool
	stub    stub.Stub
	mask    api.EventMask // what Configure answered
}

type methodKey struct{}

// The method the stub's ttrpc server dispatched, from the interceptor.
func methodOf(ctx context.Context) string {
	m, _ := ctx.Value(methodKey{}).(string)
	return m
}

// intercept runs for every request the stub's ttrpc server dispatches:
// it marks the request as having reached the stub (see observer.reached)
// and passes the method name on to the handler.
func intercept(obs *observer) ttrpc.UnaryServerInterceptor {
	return func(ctx context.Context, u ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, m ttrpc.Method) (interface{}, error) {
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		obs.reached(method)
		return m(context.WithValue(ctx, methodKey{}, method), u)
	}
}

// act does what -on says for event e: the common body of every event handler.
func (p *plugin) act(ctx context.Context, e int32, pod *api.PodSandbox, ctr *api.Container) error {
	a := p.on[e]
	if p.verbose {
		what := ""
		if ctr != nil {
			what = " container " + ctr.GetName()
		}
		logf("%s %s pod %s%s: %v", methodOf(ctx), eventName(e), pod.GetName(), what, a)
	}
	switch a.kind {
	case "delay":
		time.Sleep(time.Duration(a.ms) * time.Millisecond)
	case "error":
		return errors.New(a.message)
	}
	return nil
}

// Configure answers the subscription: -events, within what the stub handles.
func (p *plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	mask, why, err := p.subscription()
	if err != nil {
		return 0, err
	}
	rv := runtimeNRIVersion(p.stub)
	if rv == "" {
		rv = "unknown"
	}
	logf("configured by %s %s (runtime NRI version %s): subscribing to %s (0x%x, %s)",
		runtime, version, rv, maskNames(mask), int32(mask), why)
	p.mask = mask
	return mask, nil
}

func maskNames(m api.EventMask) string {
	var n []string
	for i := 1; i < len(eventNames); i++ {
		if m&(1<<(i-1)) != 0 {
			n = append(n, eventNames[i])
		}
	}
	return strings.Join(n, ",")
}

// subscription resolves -events: auto, all, old, or a list of events.
func (p *plugin) subscription() (api.EventMask, string, error) {
	handled := stubEvents
	switch norm(p.events) {
	case "all":
		return handled, "-events all: every event this stub handles", nil
	case "old":
		return oldEvents & handled, "-events old: the events of NRI v0.6-v0.9", nil
	case "auto", "":
		if v := runtimeNRIVersion(p.stub); versionAtLeast(v, 0, 10) {
			return handled, "-events auto: every event this stub handles, the runtime's NRI is " + v, nil
		}
		return oldEvents & handled, "-events auto: the runtime's NRI version is unknown or older than v0.10, so the events of v0.6-v0.9", nil
	}
	var m api.EventMask
	for _, s := range strings.Split(p.events, ",") {
		e, ok := parseEvent(s)
		if !ok {
			return 0, "", fmt.Errorf("-events: unknown event %q", s)
		}
		if handled&(1<<(e-1)) == 0 {
			return 0, "", fmt.Errorf("-events: %s is not handled by the stub of %s %s", eventName(e), nriModule, nriVersion())
		}
		m |= 1 << (e - 1)
	}
	return m, "-events " + p.events, nil
}

// versionAtLeast: "vX.Y.Z..." >= vMAJ.MIN.
func versionAtLeast(v string, maj, min int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return a > maj || (a == maj && b >= min)
}

func (p *plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	if p.verbose {
		logf("%s: %d pods, %d containers", methodOf(ctx), len(pods), len(ctrs))
	}
	return nil, nil
}

func (p *plugin) Shutdown(ctx context.Context) {
	logf("%s: the runtime is shutting down", methodOf(ctx))
}

// The events of NRI v0.6 on: every stub has them.

func (p *plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return p.act(ctx, 1, pod, nil)
}

func (p *plugin) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return p.act(ctx, 2, pod, nil)
}

func (p *plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return p.act(ctx, 3, pod, nil)
}

func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if err := p.act(ctx, 4, pod, c); err != nil {
		return nil, nil, err
	}
	return p.on[4].adjustment(), nil, nil
}

// adjustment is what an adjust action answers CreateContainer with: an
// OCI prestart hook (hooks; the kind of adjustment the runtime's default
// validator can be set to reject, reject_oci_hook_adjustment), an
// environment variable (env). nil for every other action.
func (a action) adjustment() *api.ContainerAdjustment {
	if a.kind != "adjust" {
		return nil
	}
	adj := &api.ContainerAdjustment{}
	for _, part := range a.parts {
		switch part {
		case "hooks":
			adj.AddHooks(&api.Hooks{Prestart: []*api.Hook{{Path: "/bin/true"}}})
		case "env":
			adj.AddEnv("NRI_TRACE_LAB_ADJUSTED", "1")
		}
	}
	return adj
}

func (p *plugin) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.act(ctx, 5, pod, c)
}

func (p *plugin) StartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.act(ctx, 6, pod, c)
}

func (p *plugin) PostStartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.act(ctx, 7, pod, c)
}

func (p *plugin) UpdateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	return nil, p.act(ctx, 8, pod, c)
}

func (p *plugin) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.act(ctx, 9, pod, c)
}

func (p *plugin) StopContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, p.act(ctx, 10, pod, c)
}

func (p *plugin) RemoveContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.act(ctx, 11, pod, c)
}

// ---------------------------------------------------------------- process

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-nri-plugin: "+format+"\n", args...)
}

func fatalf(code int, format string, args ...any) {
	logf("ERROR: "+format, args...)
	os.Exit(code)
}

// nriVersion is the version of github.com/containerd/nri linked in.
func nriVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == nriModule {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "(unknown)"
}

// monoNs is CLOCK_MONOTONIC in ns, the clock of nri-trace's probes.
func monoNs() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// fifo puts every thread of the process under SCHED_FIFO priority 10, as
// nri-test-plugin does: the truth's timestamps are taken right after the
// socket syscalls, and a CFS preemption in between on a loaded 2-core
// machine would put milliseconds of scheduling noise into them. Threads
// the Go runtime starts later inherit the policy from the thread that
// creates them.
func fifo() error {
	param := struct{ prio int32 }{10}
	for pass := 0; pass < 2; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if _, _, errno := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(tid), 1 /* SCHED_FIFO */, uintptr(unsafe.Pointer(&param))); errno != 0 {
				return errno
			}
		}
	}
	return nil
}

// dial connects to the runtime: the lab's NRI socket, or (pre-launched)
// the fd in NRI_PLUGIN_SOCKET. The plugin process makes the connection
// itself, so the runtime's peer is this process from the start.
func dial(socket string) (net.Conn, bool, error) {
	if socket == "" {
		if env := os.Getenv(api.PluginSocketEnvVar); env != "" {
			fd, err := strconv.Atoi(env)
			if err != nil {
				return nil, true, fmt.Errorf("%s=%q is not an fd number", api.PluginSocketEnvVar, env)
			}
			f := os.NewFile(uintptr(fd), "nri-socket")
			c, err := net.FileConn(f) // a dup, close-on-exec
			f.Close()
			if err != nil {
				return nil, true, fmt.Errorf("%s=%d: %v", api.PluginSocketEnvVar, fd, err)
			}
			return c, true, nil
		}
		socket = defaultSocket()
	}
	c, err := net.Dial("unix", socket)
	return c, false, err
}

func defaultSocket() string {
	lab := os.Getenv("NRI_TRACE_LAB_DIR")
	if lab == "" {
		lab = "/var/lib/nri-trace-lab"
	}
	return filepath.Join(lab, "run", "nri.sock")
}

func main() {
	var (
		name    = flag.String("name", "", "plugin name (default: NRI_PLUGIN_NAME, else go-nri-plugin)")
		idx     = flag.String("idx", "", "plugin index, two digits (default: NRI_PLUGIN_IDX)")
		socket  = flag.String("socket", "", "NRI socket to dial (default: the fd in NRI_PLUGIN_SOCKET, else $NRI_TRACE_LAB_DIR/run/nri.sock)")
		truth   = flag.String("truth", "", "ground-truth file (NDJSON, appended; default /tmp/go-nri-plugin-IDX-NAME.truth.ndjson)")
		events  = flag.String("events", "auto", "events to subscribe to: auto (all this stub handles when the runtime's NRI version is known and >= v0.10, else old), all, old (the 11 of NRI v0.6-v0.9), or a comma-separated list (RUN_POD_SANDBOX, run-pod-sandbox, ...)")
		sched   = flag.String("sched", "fifo", "fifo: SCHED_FIFO priority 10 for clean truth timestamps (as nri-test-plugin); other: the normal scheduler")
		verbose = flag.Bool("v", false, "log every request the stub dispatched, with the method its interceptor saw")
		version = flag.Bool("version", false, "print the NRI library version built in and exit")
		on      = onFlags{}
	)
	flag.Var(on, "on", "EVENT=ACTION: ok, delay:MS (sleep, then answer), error:MESSAGE (answer with that error: ttrpc status 2; a ValidateContainerAdjustment error is a rejection) or, for CREATE_CONTAINER, adjust:PARTS (answer with an adjustment of hooks, env or both: adjust:hooks,env); repeatable")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "go-nri-plugin: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	if *version {
		fmt.Printf("go-nri-plugin %s %s (stub events %s)\n", nriModule, nriVersion(), maskNames(stubEvents))
		return
	}
	for e := range on {
		if stubEvents&(1<<(e-1)) == 0 {
			fatalf(2, "-on %s: not an event the stub of %s %s handles", eventName(e), nriModule, nriVersion())
		}
	}
	switch *sched {
	case "fifo":
		if err := fifo(); err != nil {
			logf("SCHED_FIFO not available (%v): truth timestamps may carry scheduling noise", err)
		}
	case "other":
	default:
		fatalf(2, "-sched %q: fifo or other", *sched)
	}

	conn, prelaunched, err := dial(*socket)
	if err != nil {
		fatalf(1, "connecting to the runtime: %v", err)
	}
	// Identity as nri-test-plugin resolves it: a pre-launched plugin is
	// named by the runtime (environment), an external one by its flags.
	pick := func(flagVal, env, def string) string {
		e := os.Getenv(env)
		if prelaunched && e != "" {
			return e
		}
		if flagVal != "" {
			return flagVal
		}
		if e != "" {
			return e
		}
		return def
	}
	pname := pick(*name, api.PluginNameEnvVar, "go-nri-plugin")
	pidx := pick(*idx, api.PluginIdxEnvVar, "")
	if len(pidx) != 2 || pidx[0] < '0' || pidx[0] > '9' || pidx[1] < '0' || pidx[1] > '9' {
		fatalf(2, "plugin index %q: want two digits (-idx NN or NRI_PLUGIN_IDX)", pidx)
	}
	if *truth == "" {
		*truth = filepath.Join(os.TempDir(), fmt.Sprintf("go-nri-plugin-%s-%s.truth.ndjson", pidx, pname))
		logf("no -truth: recording to %s", *truth)
	}
	tw, err := openTruth(*truth)
	if err != nil {
		fatalf(1, "opening the truth file: %v", err)
	}
	p := &plugin{events: *events, on: on, verbose: *verbose}
	obs := newObserver(tw, pname, pidx, p)
	obs.lifecycle(map[string]any{"kind": "connected", "prelaunched": prelaunched, "pid": os.Getpid()})

	done := make(chan string, 1)
	finish := func(reason string) {
		select {
		case done <- reason:
		default:
		}
	}
	s, err := stub.New(p,
		stub.WithPluginName(pname),
		stub.WithPluginIdx(pidx),
		stub.WithConnection(&tapConn{Conn: conn, obs: obs}),
		stub.WithTTRPCOptions(nil, []ttrpc.ServerOpt{ttrpc.WithUnaryServerInterceptor(intercept(obs))}),
		stub.WithOnClose(func() { finish("the runtime closed the connection") }),
	)
	if err != nil {
		fatalf(1, "creating the stub: %v", err)
	}
	p.stub = s
	logf("%s-%s: %s %s, pid %d, truth %s", pidx, pname, nriModule, nriVersion(), os.Getpid(), *truth)

	sigC := make(chan os.Signal, 1)
	signal.Notify(sigC, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-sigC
		finish("signal " + sig.String())
	}()
	if err := s.Start(context.Background()); err != nil {
		obs.disconnected("registration failed: " + err.Error())
		fatalf(1, "%s-%s: %v", pidx, pname, err)
	}
	reason := <-done
	obs.disconnected(reason)
	s.Stop()
	logf("%s-%s: exiting: %s", pidx, pname, reason)
	if !obs.gotPastConfigure() && !strings.HasPrefix(reason, "signal") {
		// containerd closes a plugin whose Configure answer it refuses
		// ("failed to start external plugin: invalid plugin events: 0x3800"
		// on 1.7 and 2.1 for events of NRI v0.10+) right after Configure.
		fatalf(1, "%s-%s: closed right after Configure: did the runtime refuse the subscription %s (0x%x)? (its log says why)",
			pidx, pname, maskNames(p.mask), int32(p.mask))
	}
}
