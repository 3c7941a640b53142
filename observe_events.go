package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// eventHub fans live dashboard events out to every open /events stream.
// Publishing never blocks: events are refresh hints, not a durable log, so a
// subscriber whose buffer is full is dropped and reconnects for a snapshot.
type eventHub struct {
	// mu guards subs and closed; it is held only for non-blocking sends.
	mu     sync.Mutex
	subs   map[*eventSubscriber]struct{}
	closed bool
}

// eventSubscriber is one /events stream's queue of encoded events. Its
// channel is closed when the hub drops it or shuts down.
type eventSubscriber struct {
	ch chan []byte
}

// subscriberBuffer bounds how far one browser may lag before it is dropped.
const subscriberBuffer = 32

func newEventHub() *eventHub {
	return &eventHub{subs: map[*eventSubscriber]struct{}{}}
}

// subscribe registers a new stream; after close it returns an already-closed
// subscriber so late handlers end at once.
func (h *eventHub) subscribe() *eventSubscriber {
	s := &eventSubscriber{ch: make(chan []byte, subscriberBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.ch)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

// unsubscribe removes s if it is still registered.
func (h *eventHub) unsubscribe(s *eventSubscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
	}
}

// subscriberCount reports how many streams are registered.
func (h *eventHub) subscriberCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// publish queues one event for every subscriber without waiting on any.
func (h *eventHub) publish(event string, payload any) {
	data, err := encodeEvent(event, payload)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	for s := range h.subs {
		select {
		case s.ch <- data:
		default:
			delete(h.subs, s)
			close(s.ch)
		}
	}
}

// close ends every stream so that server shutdown need not wait for browsers.
func (h *eventHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}

// encodeEvent renders one server-sent event with compact JSON data.
func encodeEvent(event string, payload any) ([]byte, error) {
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", event, err)
	}
	out := make([]byte, 0, len(event)+len(data)+16)
	out = append(out, "event: "...)
	out = append(out, event...)
	out = append(out, "\ndata: "...)
	out = append(out, data...)
	out = append(out, "\n\n"...)
	return out, nil
}

// writeEvent writes one encoded event to w.
func writeEvent(w io.Writer, event string, payload any) error {
	data, err := encodeEvent(event, payload)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
