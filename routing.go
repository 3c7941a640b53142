package main

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// subscriptions watches the resources one MCP session subscribed to and
// pushes notifications/resources/updated when they change. It polls SQLite
// rather than listening in-process, because the writers it must notice are
// often other processes, Python or Go, on the same groups directory.
type subscriptions struct {
	store    *store
	interval time.Duration
	notify   func(method string, params object) error

	mu         sync.Mutex
	subs       map[string]*subscription
	order      []string // subscribed URIs in subscription order
	authorized map[string]bool

	stop chan struct{}
	done chan struct{}
}

// subscription is the state of one subscribed URI.
type subscription struct {
	wakeup    bool
	groupID   string
	contextID string
	revision  int64 // last notified message_revision of a group resource
}

const (
	uriPrefix     = "crosstalk://groups/"
	uriSuffix     = "/messages"
	wakeupSegment = "/wakeups/"
)

// recipient is a group member other than a message's sender.
type recipient struct{ contextID, name string }

// target is one routed wakeup recipient with the reason it was chosen.
type target struct{ contextID, relevance string }

// routing is the outcome of routing one message.
type routing struct {
	mentions []string
	targets  []target
	reason   string
}

// route picks a message's wakeup targets the way the original does: valid
// explicit wake_context_ids first, then urgent (everyone), then @mentions or
// @all, then everyone as a fallback. Mentions are reported whatever route
// wins. others is in the group_members table's natural order.
func route(others []recipient, text, priority string, wakeIDs []string) routing {
	var r routing
	lower := pyLower(text)
	var mentioned []recipient
	if strings.Contains(lower, "@") {
		if hasMention(lower, "all") {
			mentioned = others
		} else {
			for _, m := range others {
				if hasMention(lower, m.contextID) || hasMention(lower, m.name) {
					mentioned = append(mentioned, m)
				}
			}
		}
	}
	r.mentions = make([]string, len(mentioned))
	for i, m := range mentioned {
		r.mentions[i] = m.contextID
	}
	requested := map[string]bool{}
	for _, id := range wakeIDs {
		requested[id] = true
	}
	pick := func(list []recipient, relevance string, keep func(recipient) bool) []target {
		var out []target
		for _, m := range list {
			if keep == nil || keep(m) {
				out = append(out, target{m.contextID, relevance})
			}
		}
		return out
	}
	if explicit := pick(others, "explicit", func(m recipient) bool { return requested[m.contextID] }); len(explicit) > 0 {
		r.targets, r.reason = explicit, "explicit"
		return r
	}
	switch {
	case priority == "urgent":
		r.targets, r.reason = pick(others, "urgent", nil), "urgent"
	case len(mentioned) > 0:
		r.targets, r.reason = pick(mentioned, "mentioned", nil), "mentioned"
	default:
		r.targets, r.reason = pick(others, "fallback", nil), "fallback"
	}
	return r
}

// hasMention reports whether lower (a lowercased message) holds the complete
// token "@identifier": followed by the end of the text, whitespace or one of
// .,!?;: so that "@bob" does not match "@bobby".
func hasMention(lower, identifier string) bool {
	needle := "@" + pyLower(identifier)
	for start := 0; ; start++ {
		i := strings.Index(lower[start:], needle)
		if i < 0 {
			return false
		}
		end := start + i + len(needle)
		if end == len(lower) || strings.IndexByte(" \t\r\n.,!?;:", lower[end]) >= 0 {
			return true
		}
		start += i
	}
}

// groupURI is a group's change-signal resource.
func groupURI(groupID string) string { return uriPrefix + groupID + uriSuffix }

// wakeupURI is one member's wakeup resource; the context id is
// percent-encoded like Python's quote(context_id, safe="").
func wakeupURI(groupID, contextID string) string {
	return uriPrefix + groupID + wakeupSegment + percentEncode(contextID)
}

func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.-~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// percentDecode undoes percent-encoding leniently, like Python's unquote:
// malformed escapes are kept as they are.
func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// parseGroupURI returns the group id of a group resource URI.
func parseGroupURI(uri string) (string, error) {
	if !strings.HasPrefix(uri, uriPrefix) || !strings.HasSuffix(uri, uriSuffix) || len(uri) < len(uriPrefix)+len(uriSuffix) {
		return "", validationErrorf("Invalid Crosstalk subscription URI.")
	}
	id := uri[len(uriPrefix) : len(uri)-len(uriSuffix)]
	return id, validateGroupID(id)
}

// parseWakeupURI returns the group and context ids of a wakeup resource URI.
func parseWakeupURI(uri string) (groupID, contextID string, err error) {
	if !strings.HasPrefix(uri, uriPrefix) || !strings.Contains(uri, wakeupSegment) {
		return "", "", validationErrorf("Invalid Crosstalk wakeup subscription URI.")
	}
	groupID, encoded, _ := strings.Cut(uri[len(uriPrefix):], wakeupSegment)
	if err := validateGroupID(groupID); err != nil {
		return "", "", err
	}
	contextID = percentDecode(encoded)
	if isBlank(contextID) {
		return "", "", validationErrorf("Invalid wakeup context ID.")
	}
	return groupID, contextID, nil
}

// isWakeupURI reports whether uri names a wakeup resource rather than a group.
func isWakeupURI(uri string) bool { return strings.Contains(uri, wakeupSegment) }

func newSubscriptions(st *store, interval time.Duration, notify func(string, object) error) *subscriptions {
	m := &subscriptions{
		store: st, interval: interval, notify: notify,
		subs: map[string]*subscription{}, authorized: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go m.run()
	return m
}

// errWakeupNotAuthorized answers wakeup access by a session that has not
// joined as that context: a URI alone must not grant access.
var errWakeupNotAuthorized = authorizationErrorf("Wakeup resource is not authorized for this MCP session. Call join_group first.")

// authorizedWakeup returns the group and context of a wakeup URI that
// join_group authorized in this session.
func (m *subscriptions) authorizedWakeup(uri string) (groupID, contextID string, err error) {
	g, c, err := parseWakeupURI(uri)
	if err != nil {
		return "", "", err
	}
	if !m.isAuthorized(uri) {
		return "", "", errWakeupNotAuthorized
	}
	return g, c, nil
}

// subscribe starts watching uri. A wakeup URI must have been authorized by
// join_group in this session; a group URI starts from the current revision.
func (m *subscriptions) subscribe(uri string) error {
	sub := &subscription{}
	if isWakeupURI(uri) {
		g, c, err := m.authorizedWakeup(uri)
		if err != nil {
			return err
		}
		if _, err := m.store.messageRevision(g); err != nil {
			return err
		}
		sub.wakeup, sub.groupID, sub.contextID = true, g, c
	} else {
		g, err := parseGroupURI(uri)
		if err != nil {
			return err
		}
		rev, err := m.store.messageRevision(g)
		if err != nil {
			return err
		}
		sub.groupID, sub.revision = g, rev
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.subs[uri]; !ok {
		m.order = append(m.order, uri)
	}
	m.subs[uri] = sub
	return nil
}

// unsubscribe stops watching uri.
func (m *subscriptions) unsubscribe(uri string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(uri)
}

func (m *subscriptions) removeLocked(uri string) {
	if _, ok := m.subs[uri]; !ok {
		return
	}
	delete(m.subs, uri)
	for i, u := range m.order {
		if u == uri {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
}

// authorize lets this session read and subscribe to a joined context's
// wakeup URI.
func (m *subscriptions) authorize(uri string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.authorized[uri] = true
}

// revoke withdraws a wakeup URI's authorization and its subscription.
func (m *subscriptions) revoke(uri string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.authorized, uri)
	m.removeLocked(uri)
}

func (m *subscriptions) isAuthorized(uri string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.authorized[uri]
}

// close stops the poller and waits for it, so no notification is written
// after the server has finished. The wait is bounded, like the original's
// one-second join: a client that stopped reading stdout can leave the poller
// blocked in a write, and that must not keep the process from exiting.
func (m *subscriptions) close() {
	close(m.stop)
	select {
	case <-m.done:
	case <-time.After(time.Second):
	}
}

func (m *subscriptions) run() {
	defer close(m.done)
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.poll()
		}
	}
}

// poll checks every subscription once, in subscription order.
func (m *subscriptions) poll() {
	m.mu.Lock()
	uris := append([]string(nil), m.order...)
	subs := make([]subscription, len(uris))
	for i, u := range uris {
		subs[i] = *m.subs[u]
	}
	m.mu.Unlock()
	for i, uri := range uris {
		select {
		case <-m.stop:
			return
		default:
		}
		m.check(uri, subs[i])
	}
}

// check polls one subscription. A busy database keeps the subscription for
// the next poll; a vanished group ends it with a "deleted" notification; a
// notification that could not be written is not recorded as delivered.
func (m *subscriptions) check(uri string, sub subscription) {
	var err error
	if sub.wakeup {
		var w *wakeup
		if w, err = m.store.dueWakeup(sub.groupID, sub.contextID); err == nil {
			if w != nil && m.notify("notifications/resources/updated", object{{"uri", uri}, {"priority", w.priority}, {"relevance", w.relevance}}) == nil {
				if err := m.store.markWakeupNotified(sub.groupID, w.id); err != nil && !isBusy(err) {
					logf("mark wakeup %d of %s notified: %v", w.id, sub.groupID, err)
				}
			}
			return
		}
	} else {
		var rev int64
		if rev, err = m.store.messageRevision(sub.groupID); err == nil {
			if rev != sub.revision && m.notify("notifications/resources/updated", object{{"uri", uri}, {"priority", "normal"}, {"relevance", "group_change"}}) == nil {
				m.mu.Lock()
				if cur, ok := m.subs[uri]; ok {
					cur.revision = rev
				}
				m.mu.Unlock()
			}
			return
		}
	}
	if isBusy(err) || m.store.groupExists(sub.groupID) {
		return
	}
	m.mu.Lock()
	m.removeLocked(uri)
	m.mu.Unlock()
	m.notify("notifications/resources/updated", object{{"uri", uri}, {"relevance", "deleted"}})
}

// pyLower lowercases s as Python's str.lower() does: simple Unicode
// lowercase mappings plus the two special cases Python applies, İ → i̇ and a
// word-final Σ → ς. Mentions are matched on this form, so "@ΑΣ" means the
// same to a Go and a Python server.
func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	runes := []rune(s)
	var b strings.Builder
	for i, r := range runes {
		switch {
		case r == 'İ':
			b.WriteString("i\u0307")
		case r == 'Σ' && finalSigma(runes, i):
			b.WriteRune('ς')
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// finalSigma implements Unicode's Final_Sigma condition for runes[i]: a
// cased letter comes before it and none after it, skipping case-ignorable
// characters both ways.
func finalSigma(runes []rune, i int) bool {
	j := i - 1
	for j >= 0 && caseIgnorable(runes[j]) {
		j--
	}
	if j < 0 || !cased(runes[j]) {
		return false
	}
	k := i + 1
	for k < len(runes) && caseIgnorable(runes[k]) {
		k++
	}
	return k == len(runes) || !cased(runes[k])
}

func cased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '^', '`', '\u00b7', '\u0387', '\u05f4', '\u2018', '\u2019', '\u2024', '\u2027', '\ufe13', '\ufe52', '\ufe55', '\uff07', '\uff0e', '\uff1a':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// isPySpace is Python's str.isspace() for one character: Go's
// unicode.IsSpace plus the separators U+001C–U+001F.
func isPySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// isBlank reports whether s is empty after Python's str.strip().
func isBlank(s string) bool { return pyStrip(s) == "" }

// pyStrip trims what Python's str.strip() trims.
func pyStrip(s string) string { return strings.TrimFunc(s, isPySpace) }
