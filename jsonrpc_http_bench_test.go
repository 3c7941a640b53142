package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchClients is how many agents send concurrently, one message at a time.
const benchClients = 50

// benchSender sends one message and reports how long the answer took.
type benchSender func(i int, text string) error

// runSendBench has benchClients senders share b.N sends to one group and
// reports messages per second and the 99th-percentile send latency.
func runSendBench(b *testing.B, senders []benchSender) {
	var mu sync.Mutex
	var latencies []time.Duration
	var wg sync.WaitGroup
	next := make(chan int, b.N)
	for i := range b.N {
		next <- i
	}
	close(next)
	b.ResetTimer()
	start := time.Now()
	for c, send := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				if err := send(c, fmt.Sprintf("bench %d", i)); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				latencies = append(latencies, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(latencies)
	if len(latencies) > 0 {
		b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "msgs/s")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// benchGroup creates a group with benchClients members through call.
func benchGroup(b *testing.B, call func(name string, args map[string]any) string) string {
	var g struct {
		GroupID string `json:"group_id"`
	}
	json.Unmarshal([]byte(call("create_group", map[string]any{"context_id": "ctx-0", "name": "bench"})), &g)
	for c := range benchClients {
		call("join_group", map[string]any{"group_id": g.GroupID, "context_id": fmt.Sprintf("ctx-%d", c), "name": fmt.Sprintf("agent%d", c)})
	}
	return g.GroupID
}

// BenchmarkSend50Clients compares 50 concurrent agents sending one message
// at a time over Streamable HTTP (one session each, one server) and over
// stdio (one server process each, in process here), on one group. Over
// HTTP it runs without a token, with the shared token, and with 50
// per-agent tokens, each agent's own.
func BenchmarkSend50Clients(b *testing.B) {
	b.Run("http", func(b *testing.B) { benchHTTPSends(b, nil, func(int) string { return "" }) })
	b.Run("http-shared-token", func(b *testing.B) {
		tokens, _ := newTokenTable("bench-setup", "")
		benchHTTPSends(b, tokens, func(int) string { return "bench-setup" })
	})
	b.Run("http-agent-tokens", func(b *testing.B) {
		agents := [][]string{{"setup", "bench-setup", "*"}}
		for c := range benchClients {
			agents = append(agents, []string{fmt.Sprintf("agent%d", c), fmt.Sprintf("bench-token-%d", c), fmt.Sprintf("ctx-%d", c)})
		}
		tokens, err := newTokenTable("", writeTokensFile(b, filepath.Join(b.TempDir(), "tokens"), agents...))
		if err != nil {
			b.Fatal(err)
		}
		benchHTTPSends(b, tokens, func(c int) string { return fmt.Sprintf("bench-token-%d", c) })
	})
	b.Run("stdio", func(b *testing.B) {
		dir := b.TempDir()
		st := newTestStore(b, dir)
		pipes := make([]*benchStdio, benchClients)
		for c := range pipes {
			pipes[c] = newBenchStdio(b, st)
		}
		group := benchGroup(b, func(name string, args map[string]any) string {
			text, err := pipes[0].tool(name, args)
			if err != nil {
				b.Fatal(err)
			}
			return text
		})
		senders := make([]benchSender, benchClients)
		for c := range senders {
			senders[c] = func(i int, text string) error {
				_, err := pipes[c].tool("send_message", map[string]any{"group_id": group, "context_id": fmt.Sprintf("ctx-%d", c), "name": fmt.Sprintf("agent%d", c), "message": text})
				return err
			}
		}
		runSendBench(b, senders)
	})
}

// benchHTTPSends runs the HTTP send benchmark on a server accepting
// tokens: agent c sends with tokenOf(c); "bench-setup" makes the group.
func benchHTTPSends(b *testing.B, tokens *tokenTable, tokenOf func(c int) string) {
	s := newHTTPTokensServer(b, tokens, httpLimits{})
	http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost = benchClients
	setup := s.client(b, "bench-setup")
	if tokens == nil {
		setup.token = ""
	}
	setup.initialize()
	group := benchGroup(b, func(name string, args map[string]any) string { return setup.tool(name, args).text })
	senders := make([]benchSender, benchClients)
	for c := range senders {
		client := s.client(b, tokenOf(c))
		client.initialize()
		senders[c] = func(i int, text string) error {
			args := map[string]any{"caller_name": "bench", "group_id": group, "context_id": fmt.Sprintf("ctx-%d", c), "name": fmt.Sprintf("agent%d", c), "message": text}
			msg, ok := client.tryCall("tools/call", map[string]any{"name": "send_message", "arguments": args})
			if !ok || msg.Error != nil {
				return fmt.Errorf("http send: %+v", msg.Error)
			}
			return nil
		}
	}
	runSendBench(b, senders)
}

// benchStdio is an in-process stdio session: a server reading a pipe.
type benchStdio struct {
	in  io.Writer
	out *bufio.Reader
	id  int
}

func newBenchStdio(b *testing.B, st *store) *benchStdio {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := newServer(st, outW, newServerConfig(version, time.Hour))
	go srv.serve(inR)
	b.Cleanup(func() {
		inW.Close()
		outR.Close()
		srv.subs.close()
	})
	p := &benchStdio{in: inW, out: bufio.NewReader(outR)}
	if _, err := p.roundTrip("initialize", map[string]any{"protocolVersion": "2025-11-25"}); err != nil {
		b.Fatal(err)
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	return p
}

// roundTrip writes one request and reads one answer line.
func (p *benchStdio) roundTrip(method string, params any) ([]byte, error) {
	p.id++
	line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": p.id, "method": method, "params": params})
	if _, err := p.in.Write(append(line, '\n')); err != nil {
		return nil, err
	}
	return p.out.ReadBytes('\n')
}

// tool calls a tool and returns its text, or an error when it failed.
func (p *benchStdio) tool(name string, args map[string]any) (string, error) {
	req := toolRequest(name, args)
	answer, err := p.roundTrip(req.Method, req.Params)
	if err != nil {
		return "", err
	}
	var msg rpcMessage
	json.Unmarshal(answer, &msg)
	reply, err := parseToolReply(&msg)
	if err == nil && reply.isError {
		err = fmt.Errorf("%s: %s", name, reply.text)
	}
	return reply.text, err
}
