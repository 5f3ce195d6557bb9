package ovsdb

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/model"
)

// Interface external_ids keys: the contract between the tierflow CNI plugin
// (which writes them when it attaches a pod) and the agent (which reads
// them to map pods to OpenFlow ports).
const (
	// KeyPodNamespace and KeyPodName identify the pod of the interface.
	KeyPodNamespace = "tierflow.io/pod-namespace"
	KeyPodName      = "tierflow.io/pod-name"
	// KeyPodIPs holds the pod's addresses, comma-separated, IPv4 and/or IPv6
	// without prefix length ("10.0.0.5,fd00::5").
	KeyPodIPs = "tierflow.io/pod-ips"
	// KeyPodMAC is the MAC address of the pod's interface (inside the pod).
	KeyPodMAC = "tierflow.io/pod-mac"
	// KeyPodUID is the pod's metadata.uid (CNI_ARGS K8S_POD_UID): the
	// agent admits the port only for the pod with that UID, never for a
	// later pod of the same name.
	KeyPodUID = "tierflow.io/pod-uid"
	// KeyAdmission is written by the agent, not the CNI plugin:
	// AdmissionAdmitted once the port's pod is policed (its policies at a
	// generation that includes it are installed), else "pending: " and
	// why. tierflow-cni's ADD waits for it.
	KeyAdmission      = "tierflow.io/admission"
	AdmissionAdmitted = "admitted"
	// KeyRole marks a non-pod interface; RoleUplink is the uplink/underlay
	// port towards other nodes.
	KeyRole    = "tierflow.io/role"
	RoleUplink = "uplink"
)

// PortInfo is what the external_ids and ovs-vswitchd say about one
// interface tierflow cares about: a pod interface (KeyPodName set) or the
// uplink (KeyRole=uplink).
type PortInfo struct {
	Interface string
	// OFPort is 0 until ovs-vswitchd assigned one; it stays 0 when the
	// interface could not be opened (Error says why).
	OFPort uint32
	Error  string
	Role   string // "" for pods
	// Pod identity and addresses (pods only).
	PodNamespace string
	PodName      string
	PodUID       string // empty when the CNI plugin recorded none
	IPs          []netip.Addr
	MAC          net.HardwareAddr
}

// PodKey is "namespace/name".
func (p PortInfo) PodKey() string { return p.PodNamespace + "/" + p.PodName }

// IsUplink reports whether this is the uplink port.
func (p PortInfo) IsUplink() bool { return p.Role == RoleUplink }

func (p PortInfo) equal(o PortInfo) bool {
	if p.Interface != o.Interface || p.OFPort != o.OFPort || p.Error != o.Error || p.Role != o.Role ||
		p.PodNamespace != o.PodNamespace || p.PodName != o.PodName || p.PodUID != o.PodUID || p.MAC.String() != o.MAC.String() ||
		len(p.IPs) != len(o.IPs) {
		return false
	}
	for i := range p.IPs {
		if p.IPs[i] != o.IPs[i] {
			return false
		}
	}
	return true
}

// EventType says what changed.
type EventType int

const (
	// PortAdded: an interface with tierflow external_ids appeared (or got
	// them).
	PortAdded EventType = iota
	// PortUpdated: its ofport, error, addresses or identity changed.
	PortUpdated
	// PortRemoved: the interface is gone (or lost its tierflow keys, or its
	// keys became invalid).
	PortRemoved
)

func (t EventType) String() string {
	return [...]string{"added", "updated", "removed"}[t]
}

// Event is one change of the watched ports. Old is set for PortUpdated.
type Event struct {
	Type EventType
	Port PortInfo
	Old  PortInfo
}

// OFPortAssigned reports whether this event is the ofport becoming known.
func (e Event) OFPortAssigned() bool {
	return (e.Type == PortAdded && e.Port.OFPort != 0) ||
		(e.Type == PortUpdated && e.Old.OFPort == 0 && e.Port.OFPort != 0)
}

// Watcher maps pods to OpenFlow ports from the Interface table.
type Watcher struct {
	c     *Client
	mu    sync.Mutex
	ports map[string]PortInfo // by interface name
	// sorted is ports sorted by interface name, made by Ports when the
	// ports changed since (nil), else copied.
	sorted  []PortInfo
	handler func(Event)
	// invalid records interfaces whose tierflow keys could not be parsed.
	invalid map[string]error
	// Events wait in queue for the delivery goroutine, so the handler may
	// call the Watcher's methods.
	queue   []Event
	wake    chan struct{}
	stop    chan struct{}
	stopped bool
}

// WatchPorts starts tracking interfaces with tierflow external_ids. The
// handler (may be nil) is called for every change, one at a time and in
// order, from the watcher's own goroutine; ports already present come first
// as PortAdded. The watcher's state (Ports, Pods, ...) is updated before the
// event is delivered. Stop ends the delivery. Listing the ports already
// present ends with ctx (the watcher is then stopped and not returned).
//
// Fail closed: an interface whose keys do not parse (bad IP or MAC, pod name
// without namespace) is not reported as a pod at all — the agent must not
// apply policy for addresses nobody vouched for — and is listed by Invalid.
func (c *Client) WatchPorts(ctx context.Context, handler func(Event)) (*Watcher, error) {
	w := &Watcher{c: c, ports: map[string]PortInfo{}, handler: handler, invalid: map[string]error{},
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
	go w.deliver()
	// Hold the lock while registering and listing: updates that arrive
	// meanwhile wait and then apply on top of the listed state (each carries
	// a full row, so replaying one already seen is harmless).
	w.mu.Lock()
	defer w.mu.Unlock()
	c.ovs.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(table string, m model.Model) { w.onChange(table, nil, m) },
		UpdateFunc: func(table string, old, m model.Model) { w.onChange(table, old, m) },
		DeleteFunc: func(table string, m model.Model) { w.onChange(table, m, nil) },
	})
	rows, err := boundedValue(c, ctx, func(ctx context.Context) ([]Interface, error) {
		var rows []Interface
		err := c.list(ctx, func(*Interface) bool { return true }, &rows)
		return rows, err
	})
	if err != nil {
		// The handler stays registered (libovsdb cannot remove one) and
		// ignores what comes.
		w.stopLocked()
		return nil, fmt.Errorf("ovsdb: listing the interfaces: %w", err)
	}
	for i := range rows {
		w.apply(nil, &rows[i])
	}
	return w, nil
}

func (w *Watcher) onChange(table string, old, cur model.Model) {
	switch {
	case table == tableInterface:
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stopped {
			return
		}
		w.apply(old, cur)
	case table == tableOpenvSwitch && old == nil:
		// The root row is added only when libovsdb refilled its cache
		// (or it is the initial fill's, delivered late: harmless).
		w.resync()
	}
}

// resync makes the state the cache's Interface rows. libovsdb purges its
// cache when it reconnects to a server that does not know the client's
// last transaction (ovsdb-server restarted, a standalone database) and
// fills it again with every row as added: a row deleted while the client
// was away gets no delete event, and its port would stay here. resync
// runs from the event of the refill's root row: libovsdb delivers events
// after the refill, so the cache holds all of it (reading it waits while
// a refill runs).
func (w *Watcher) resync() {
	var rows []Interface
	if err := w.c.list(context.Background(), func(*Interface) bool { return true }, &rows); err != nil {
		// Not expected (the cache is read in place); the next refill
		// tries again.
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	present := make(map[string]bool, len(rows))
	for i := range rows {
		present[rows[i].Name] = true
		w.apply(nil, &rows[i])
	}
	var gone []string
	for name := range w.ports {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	for name := range w.invalid {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	for _, name := range slices.Compact(gone) {
		w.apply(&Interface{Name: name}, nil)
	}
}

// apply updates the state for one Interface row change and calls the
// handler; w.mu is held, so events are delivered in state order.
func (w *Watcher) apply(old, cur model.Model) {
	var name string
	var next *PortInfo
	if cur != nil {
		iface := cur.(*Interface)
		name = iface.Name
		info, ok, err := portInfo(iface)
		if err != nil {
			w.invalid[name] = err
		} else {
			delete(w.invalid, name)
		}
		if ok && err == nil {
			next = &info
		}
	} else {
		name = old.(*Interface).Name
		delete(w.invalid, name)
	}
	prev, had := w.ports[name]
	var ev *Event
	switch {
	case next == nil && had:
		delete(w.ports, name)
		ev = &Event{Type: PortRemoved, Port: prev}
	case next != nil && !had:
		w.ports[name] = *next
		ev = &Event{Type: PortAdded, Port: *next}
	case next != nil && had && !prev.equal(*next):
		w.ports[name] = *next
		ev = &Event{Type: PortUpdated, Port: *next, Old: prev}
	}
	if ev != nil {
		w.sorted = nil // the ports changed
	}
	if ev != nil && w.handler != nil && !w.stopped {
		w.queue = append(w.queue, *ev)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *Watcher) deliver() {
	for {
		select {
		case <-w.stop:
			return
		case <-w.wake:
		}
		for {
			w.mu.Lock()
			if w.stopped || len(w.queue) == 0 {
				w.mu.Unlock()
				break
			}
			ev := w.queue[0]
			w.queue = w.queue[1:]
			w.mu.Unlock()
			w.handler(ev)
		}
	}
}

// Stop ends event delivery; the state stops changing too.
func (w *Watcher) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
}

func (w *Watcher) stopLocked() {
	if !w.stopped {
		w.stopped = true
		close(w.stop)
	}
}

// portInfo extracts tierflow's view of an interface; ok is false for
// interfaces without tierflow keys.
func portInfo(iface *Interface) (PortInfo, bool, error) {
	ids := iface.ExternalIDs
	role := ids[KeyRole]
	podName := ids[KeyPodName]
	if role == "" && podName == "" {
		return PortInfo{}, false, nil
	}
	info := PortInfo{Interface: iface.Name, Role: role}
	if iface.OFPort != nil && *iface.OFPort > 0 {
		info.OFPort = uint32(*iface.OFPort)
	}
	if iface.Error != nil {
		info.Error = *iface.Error
	}
	if role != "" {
		if role != RoleUplink {
			return PortInfo{}, true, fmt.Errorf("interface %s: unknown %s %q", iface.Name, KeyRole, role)
		}
		if podName != "" {
			return PortInfo{}, true, fmt.Errorf("interface %s: both a pod and role %q", iface.Name, role)
		}
		return info, true, nil
	}
	info.PodName = podName
	info.PodNamespace = ids[KeyPodNamespace]
	info.PodUID = ids[KeyPodUID]
	if info.PodNamespace == "" {
		return PortInfo{}, true, fmt.Errorf("interface %s: %s without %s", iface.Name, KeyPodName, KeyPodNamespace)
	}
	if s := strings.TrimSpace(ids[KeyPodIPs]); s != "" {
		for _, part := range strings.Split(s, ",") {
			addr, err := netip.ParseAddr(strings.TrimSpace(part))
			if err != nil || addr.Zone() != "" {
				return PortInfo{}, true, fmt.Errorf("interface %s: %s %q: bad address %q", iface.Name, KeyPodIPs, s, part)
			}
			info.IPs = append(info.IPs, addr.Unmap())
		}
		sort.Slice(info.IPs, func(i, j int) bool { return info.IPs[i].Less(info.IPs[j]) })
	}
	if s := ids[KeyPodMAC]; s != "" {
		mac, err := net.ParseMAC(s)
		if err != nil || len(mac) != 6 {
			return PortInfo{}, true, fmt.Errorf("interface %s: %s %q is not a MAC address", iface.Name, KeyPodMAC, s)
		}
		info.MAC = mac
	}
	return info, true, nil
}

// Ports returns every tracked port, sorted by interface name.
func (w *Watcher) Ports() []PortInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sorted == nil {
		w.sorted = make([]PortInfo, 0, len(w.ports))
		for _, p := range w.ports {
			w.sorted = append(w.sorted, p)
		}
		sort.Slice(w.sorted, func(i, j int) bool { return w.sorted[i].Interface < w.sorted[j].Interface })
	}
	return slices.Clone(w.sorted)
}

// Pods returns the pod ports by "namespace/name". If two interfaces claim
// the same pod, the one with the lexically smaller interface name wins.
func (w *Watcher) Pods() map[string]PortInfo {
	out := map[string]PortInfo{}
	for _, p := range w.Ports() {
		if p.Role != "" {
			continue
		}
		if _, dup := out[p.PodKey()]; !dup {
			out[p.PodKey()] = p
		}
	}
	return out
}

// Pod returns one pod's port.
func (w *Watcher) Pod(namespace, name string) (PortInfo, bool) {
	p, ok := w.Pods()[namespace+"/"+name]
	return p, ok
}

// Uplink returns the uplink port, if there is one.
func (w *Watcher) Uplink() (PortInfo, bool) {
	for _, p := range w.Ports() {
		if p.IsUplink() {
			return p, true
		}
	}
	return PortInfo{}, false
}

// Invalid returns the interfaces whose tierflow keys could not be parsed.
func (w *Watcher) Invalid() map[string]error {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]error, len(w.invalid))
	for k, v := range w.invalid {
		out[k] = v
	}
	return out
}
