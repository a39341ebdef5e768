// The plugin's view of the wire: what the runtime sent and what the stub
// answered, parsed from the bytes of the plugin's end of the connection as
// they are read and written, and written down as ground truth.
//
// The NRI connection is one socket multiplexed by the NRI project's
// pkg/net/multiplex: frames of an 8-byte header (connection id, payload
// length; both big-endian uint32) and the payload. Connection 1 carries
// the Plugin service (the runtime's requests, the plugin's responses),
// connection 2 the Runtime service (the plugin's RegisterPlugin and
// UpdateContainers). On each, ttrpc messages: a 10-byte header (length,
// stream id: big-endian uint32; type: 1 request, 2 response, 3 data;
// flags) and a protobuf body, ttrpc's Request {service, method, payload,
// timeout_nano, metadata} or Response {status, payload}.

package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

const (
	muxHeaderLen    = 8
	ttrpcHeaderLen  = 10
	pluginConn      = 1 // multiplex.PluginServiceConn
	runtimeConn     = 2 // multiplex.RuntimeServiceConn
	ttrpcRequest    = 1
	ttrpcResponse   = 2
	codeUnavailable = 14
)

type direction int

const (
	fromRuntime direction = iota // read by the plugin
	toRuntime                    // written by the plugin
)

// ---------------------------------------------------------------- truth

type truthWriter struct {
	mu sync.Mutex
	f  *os.File
}

func openTruth(path string) (*truthWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &truthWriter{f: f}, nil
}

// write appends one record as one line, in one write(2): a plugin may be
// killed at any moment, and other writers may append to the same file.
func (t *truthWriter) write(rec any) {
	line, err := json.Marshal(rec)
	if err != nil {
		logf("truth: %v", err)
		return
	}
	line = append(line, '\n')
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := t.f.Write(line); err != nil {
		logf("truth: %v", err)
	}
}

// Truth::Nri of lab/src/truth.rs (serde: internally tagged by "source";
// an Option is null when None).
type nriTruth struct {
	Source      string         `json:"source"` // "nri"
	Plugin      string         `json:"plugin"`
	Index       string         `json:"index"`
	Method      string         `json:"method"`
	Event       *string        `json:"event"`
	Pod         *podRef        `json:"pod"`
	Container   *ctrRef        `json:"container"`
	RecvMonoNs  uint64         `json:"recv_mono_ns"`
	ReplyMonoNs *uint64        `json:"reply_mono_ns"`
	Action      map[string]any `json:"action"`
	Outcome     map[string]any `json:"outcome"`
}

// Truth::Plugin.
type pluginTruth struct {
	Source string         `json:"source"` // "plugin"
	Plugin string         `json:"plugin"`
	Index  string         `json:"index"`
	MonoNs uint64         `json:"mono_ns"`
	What   map[string]any `json:"what"`
}

// NriPod, NriContainer.
type podRef struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

type ctrRef struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	PodSandboxID string `json:"pod_sandbox_id"`
}

func podOf(p *api.PodSandbox) *podRef {
	if p == nil {
		return nil
	}
	return &podRef{ID: p.GetId(), Name: p.GetName(), Namespace: p.GetNamespace(), UID: p.GetUid()}
}

func ctrOf(c *api.Container) *ctrRef {
	if c == nil {
		return nil
	}
	return &ctrRef{ID: c.GetId(), Name: c.GetName(), PodSandboxID: c.GetPodSandboxId()}
}

// ---------------------------------------------------------------- frames

// frames reassembles one direction of the trunk into ttrpc messages.
type frames struct {
	trunk []byte            // not yet a whole mux frame
	conns map[uint32][]byte // per mux connection: not yet a whole ttrpc message
}

type message struct {
	conn, stream uint32
	typ, flags   byte
	body         []byte
}

func (f *frames) feed(data []byte, emit func(message)) {
	f.trunk = append(f.trunk, data...)
	for len(f.trunk) >= muxHeaderLen {
		cid := binary.BigEndian.Uint32(f.trunk[0:4])
		n := int(binary.BigEndian.Uint32(f.trunk[4:8]))
		if len(f.trunk) < muxHeaderLen+n {
			break
		}
		if f.conns == nil {
			f.conns = map[uint32][]byte{}
		}
		buf := append(f.conns[cid], f.trunk[muxHeaderLen:muxHeaderLen+n]...)
		f.trunk = f.trunk[muxHeaderLen+n:]
		for len(buf) >= ttrpcHeaderLen {
			l := int(binary.BigEndian.Uint32(buf[0:4]))
			if len(buf) < ttrpcHeaderLen+l {
				break
			}
			emit(message{
				conn:   cid,
				stream: binary.BigEndian.Uint32(buf[4:8]),
				typ:    buf[8],
				flags:  buf[9],
				body:   buf[ttrpcHeaderLen : ttrpcHeaderLen+l],
			})
			buf = buf[ttrpcHeaderLen+l:]
		}
		f.conns[cid] = append([]byte(nil), buf...)
	}
	f.trunk = append([]byte(nil), f.trunk...)
}

// ---------------------------------------------------------------- observer

// call is one request of the runtime's, from its arrival to its record.
type call struct {
	method      string
	recv        uint64
	timeoutNano int64
	event       int32 // 0: not an event
	pod         *api.PodSandbox
	ctr         *api.Container
	reached     bool // the stub's server dispatched it (the interceptor ran)
	configure   *api.ConfigureRequest
	// Synchronize: Truth::Plugin Synchronized, recorded per request as
	// nri-test-plugin does (one per part of a split Synchronize)
	synchronized map[string]any
}

type observer struct {
	mu       sync.Mutex
	in, out  frames
	calls    map[uint32]*call // Plugin service requests by ttrpc stream id
	register map[uint32]bool  // our RegisterPlugin requests by stream id
	tw       *truthWriter
	name     string
	idx      string
	p        *plugin
	once     sync.Once
	// a request other than Configure came (a pre-launched plugin on NRI
	// v0.6 gets no Synchronize, only events)
	pastConfigure bool
}

func (o *observer) gotPastConfigure() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pastConfigure
}

func newObserver(tw *truthWriter, name, idx string, p *plugin) *observer {
	return &observer{tw: tw, name: name, idx: idx, p: p, calls: map[uint32]*call{}, register: map[uint32]bool{}}
}

func (o *observer) lifecycle(what map[string]any) {
	o.tw.write(pluginTruth{Source: "plugin", Plugin: o.name, Index: o.idx, MonoNs: monoNs(), What: what})
}

func (o *observer) feed(dir direction, data []byte, now uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := &o.in
	if dir == toRuntime {
		f = &o.out
	}
	f.feed(data, func(m message) { o.message(dir, m, now) })
}

func (o *observer) message(dir direction, m message, now uint64) {
	switch {
	case dir == fromRuntime && m.conn == pluginConn && m.typ == ttrpcRequest:
		var req ttrpc.Request
		if err := proto.Unmarshal(m.body, &req); err != nil {
			logf("wire: undecodable request on stream %d: %v", m.stream, err)
			return
		}
		c := &call{method: req.Method, recv: now, timeoutNano: req.TimeoutNano}
		decodeRequest(c, req.Payload)
		o.calls[m.stream] = c
		if c.method != "Configure" {
			o.pastConfigure = true
		}
		if c.synchronized != nil {
			o.lifecycle(c.synchronized)
		}
	case dir == toRuntime && m.conn == pluginConn && m.typ == ttrpcResponse:
		c := o.calls[m.stream]
		if c == nil {
			logf("wire: a response on stream %d to no request seen", m.stream)
			return
		}
		delete(o.calls, m.stream)
		var rsp ttrpc.Response
		if err := proto.Unmarshal(m.body, &rsp); err != nil {
			logf("wire: undecodable response on stream %d: %v", m.stream, err)
			return
		}
		code := rsp.GetStatus().GetCode()
		outcome := map[string]any{"kind": "ok"}
		if code != 0 {
			outcome = map[string]any{"kind": "error", "code": code, "message": rsp.GetStatus().GetMessage()}
		}
		o.record(c, &now, outcome)
		if c.configure != nil && code == 0 {
			var cr api.ConfigureResponse
			if err := proto.Unmarshal(rsp.Payload, &cr); err == nil {
				o.lifecycle(map[string]any{
					"kind":        "configured",
					"runtime":     c.configure.GetRuntimeName(),
					"version":     c.configure.GetRuntimeVersion(),
					"events_mask": cr.GetEvents(),
				})
			}
		}
	case dir == toRuntime && m.conn == runtimeConn && m.typ == ttrpcRequest:
		var req ttrpc.Request
		if err := proto.Unmarshal(m.body, &req); err == nil && req.Method == "RegisterPlugin" {
			o.register[m.stream] = true
		}
	case dir == fromRuntime && m.conn == runtimeConn && m.typ == ttrpcResponse:
		if !o.register[m.stream] {
			return
		}
		delete(o.register, m.stream)
		var rsp ttrpc.Response
		if err := proto.Unmarshal(m.body, &rsp); err != nil {
			return
		}
		if rsp.GetStatus().GetCode() == 0 {
			o.lifecycle(map[string]any{"kind": "registered"})
		} else {
			logf("RegisterPlugin refused: status %d %s", rsp.GetStatus().GetCode(), rsp.GetStatus().GetMessage())
		}
	}
}

// decodeRequest reads the event, pod and container of a Plugin service
// request: StateChange {event = 1, pod = 2, container = 3}; every event
// method's request has pod = 1 and (container events) container = 2
// (UpdatePodSandbox: field 2 is the overhead, not a container). The same
// for both stubs, whatever request types their api package has.
func decodeRequest(c *call, payload []byte) {
	switch c.method {
	case "StateChange":
		var ev api.StateChangeEvent
		if err := proto.Unmarshal(payload, &ev); err != nil {
			logf("wire: undecodable StateChange: %v", err)
			return
		}
		c.event, c.pod, c.ctr = int32(ev.GetEvent()), ev.GetPod(), ev.GetContainer()
		return
	case "Configure":
		var req api.ConfigureRequest
		if err := proto.Unmarshal(payload, &req); err == nil {
			c.configure = &req
		}
		return
	case "Synchronize":
		var req api.SynchronizeRequest
		if err := proto.Unmarshal(payload, &req); err != nil {
			return
		}
		pods := make([]*podRef, 0, len(req.GetPods()))
		for _, p := range req.GetPods() {
			pods = append(pods, podOf(p))
		}
		ids := make([]string, 0, len(req.GetContainers()))
		for _, k := range req.GetContainers() {
			ids = append(ids, k.GetId())
		}
		what := map[string]any{"kind": "synchronized", "pods": pods, "containers": len(ids)}
		if len(ids) > 0 {
			what["container_ids"] = ids
		}
		c.synchronized = what
		return
	}
	e, ok := methodEvent[c.method]
	if !ok {
		return
	}
	c.event = e
	b := payload
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			logf("wire: undecodable %s request", c.method)
			return
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || (num == 2 && c.method != "UpdatePodSandbox")) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				logf("wire: undecodable %s request", c.method)
				return
			}
			b = b[n:]
			if num == 1 {
				c.pod = &api.PodSandbox{}
				if err := proto.Unmarshal(v, c.pod); err != nil {
					logf("wire: %s pod: %v", c.method, err)
				}
			} else {
				c.ctr = &api.Container{}
				if err := proto.Unmarshal(v, c.ctr); err != nil {
					logf("wire: %s container: %v", c.method, err)
				}
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			logf("wire: undecodable %s request", c.method)
			return
		}
		b = b[n:]
	}
}

// record writes Truth::Nri for c: answered at *reply, or never (nil).
func (o *observer) record(c *call, reply *uint64, outcome map[string]any) {
	t := nriTruth{
		Source:      "nri",
		Plugin:      o.name,
		Index:       o.idx,
		Method:      c.method,
		Pod:         podOf(c.pod),
		Container:   ctrOf(c.ctr),
		RecvMonoNs:  c.recv,
		ReplyMonoNs: reply,
		Action:      action{}.json(),
		Outcome:     outcome,
	}
	if c.event != 0 {
		name := eventName(c.event)
		t.Event = &name
		// Only a request the stub dispatched to the plugin's handler got
		// the configured action; an Unimplemented answer did not.
		if c.reached {
			t.Action = o.p.on[c.event].json()
		}
	}
	o.tw.write(t)
}

// reached: the stub's ttrpc server dispatched a request for method (its
// interceptor ran): the oldest unanswered one of that method. The runtime
// sends one request at a time per plugin, so there is one.
func (o *observer) reached(method string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var first *call
	for _, c := range o.calls {
		if c.method == method && !c.reached && (first == nil || c.recv < first.recv) {
			first = c
		}
	}
	if first == nil {
		logf("wire: the stub dispatched %s, but no such request is pending", method)
		return
	}
	first.reached = true
}

// disconnected: the connection is gone (or we are leaving). Requests never
// answered are recorded as nri-test-plugin does: deadline_exceeded when
// the runtime's timeout has expired, else unavailable.
func (o *observer) disconnected(reason string) {
	o.once.Do(func() {
		o.mu.Lock()
		now := monoNs()
		for id, c := range o.calls {
			delete(o.calls, id)
			outcome := map[string]any{"kind": "error", "code": codeUnavailable, "message": "connection closed before the reply"}
			if c.timeoutNano > 0 && now-c.recv >= uint64(c.timeoutNano) {
				outcome = map[string]any{"kind": "deadline_exceeded"}
			}
			o.record(c, nil, outcome)
		}
		o.mu.Unlock()
		o.lifecycle(map[string]any{"kind": "disconnected", "reason": reason})
	})
}

// ---------------------------------------------------------------- the tap

// tapConn is the plugin's connection to the runtime as the stub gets it:
// every read and write passes through the observer, stamped right after
// its syscall returned.
type tapConn struct {
	net.Conn
	obs *observer
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	now := monoNs()
	if n > 0 {
		c.obs.feed(fromRuntime, b[:n], now)
	}
	if err != nil {
		reason := "connection error: " + err.Error()
		if errors.Is(err, io.EOF) {
			reason = "the runtime closed the connection"
		}
		if !errors.Is(err, net.ErrClosed) {
			c.obs.disconnected(reason)
		}
	}
	return n, err
}

func (c *tapConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	now := monoNs()
	if n > 0 {
		c.obs.feed(toRuntime, b[:n], now)
	}
	return n, err
}
