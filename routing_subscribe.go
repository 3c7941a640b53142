package main

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultPollInterval is the original's refresh interval, which the
// subscription poller and the dashboard (observe.go) start from.
const defaultPollInterval = 500 * time.Millisecond

// pollInterval reads CROSSTALK_POLL_INTERVAL_SECONDS; a missing, invalid,
// non-positive or non-finite value means the default 0.5 s.
func pollInterval(value string) time.Duration {
	if d, ok := parseSeconds(value); ok {
		return d
	}
	return defaultPollInterval
}

// parseSeconds reads a finite positive number of seconds (the poll
// intervals) as at least 1 ms, since a ticker panics on zero, and at most
// the largest Duration.
func parseSeconds(value string) (time.Duration, bool) {
	v, err := strconv.ParseFloat(pyStrip(value), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, false
	}
	if nanos := v * float64(time.Second); nanos < math.MaxInt64 {
		return max(time.Duration(nanos), time.Millisecond), true
	}
	return math.MaxInt64, true
}

// fileEventsEnabled reads CROSSTALK_FILE_EVENTS: file events are on unless
// it says 0, off, false or no, for pure polling on a network file system
// written from several machines.
func fileEventsEnabled(value string) bool {
	switch strings.ToLower(pyStrip(value)) {
	case "0", "off", "false", "no":
		return false
	}
	return true
}

// authorizedWakeup returns the group and context of a wakeup URI that
// join_group authorized in this session and that it may still speak for.
func (m *subscriptions) authorizedWakeup(uri string) (groupID, contextID string, err error) {
	g, c, err := parseWakeupURI(uri)
	if err != nil {
		return "", "", err
	}
	if refused := m.speaksFor(c); refused != nil {
		return "", "", refused
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.authorized[uri] {
		return "", "", errWakeupNotAuthorized
	}
	return g, c, nil
}

// subscribe starts watching uri. A wakeup URI must have been authorized by
// join_group in this session; a group URI starts from the current revision.
func (m *subscriptions) subscribe(uri string) error {
	sub := &subscription{wakeup: isWakeupURI(uri)}
	var err error
	if sub.wakeup {
		sub.groupID, sub.contextID, err = m.authorizedWakeup(uri)
	} else {
		sub.groupID, err = parseGroupURI(uri)
	}
	// Either read also checks that the group exists; a wakeup needs no revision.
	if err == nil && sub.wakeup {
		_, err = m.store.nextWakeupReminder(sub.groupID, sub.contextID)
	} else if err == nil {
		sub.revision, err = m.store.messageRevision(sub.groupID)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.subs[uri]; !ok {
		m.order = append(m.order, uri)
	}
	m.subs[uri] = sub
	m.regroupLocked()
	return nil
}

// regroupLocked tells the poller that the subscriptions changed.
func (m *subscriptions) regroupLocked() {
	select {
	case m.regroup <- struct{}{}:
	default: // one is pending; the poller reads the set when it takes it
	}
}

// groups returns the groups of the current subscriptions, once each.
func (m *subscriptions) groups() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	groups := []string{}
	for _, uri := range m.order {
		if g := m.subs[uri].groupID; !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups
}

// unsubscribe stops watching uri.
func (m *subscriptions) unsubscribe(uri string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(uri)
}

// removeLocked drops subscription uri; m.mu is held.
func (m *subscriptions) removeLocked(uri string) {
	if _, ok := m.subs[uri]; !ok {
		return
	}
	delete(m.subs, uri)
	m.regroupLocked()
	m.order = slices.DeleteFunc(m.order, func(u string) bool { return u == uri })
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
