package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHTTPCORS shows that a browser page on an origin the guard accepts
// (loopback, or listed with --allow-origin) can use the server: its preflight
// is answered without a token and reaches no MCP code, and the answers it
// reads carry Access-Control-Allow-Origin and expose Mcp-Session-Id. A
// refused origin gets no CORS header at all.
func TestHTTPCORS(t *testing.T) {
	const token = "s3cret-token"
	s := newHTTPTestServer(t, token, httpLimits{})
	reached := 0
	guard := newHTTPGuard(true, s.t.tokens, []string{"https://app.example/"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		s.t.ServeHTTP(w, r)
	}))
	initialize := string(s.client(t, token).request("initialize", map[string]any{"protocolVersion": "2025-11-25"}))
	preflight := map[string]string{"Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization,content-type,mcp-protocol-version,mcp-session-id"}
	tests := []struct {
		name, method, origin, token, body string
		header                            map[string]string
		want                              int
		wantCORS, wantReached             bool
	}{
		{"preflight from a loopback origin", http.MethodOptions, "http://localhost:6274", "", "", preflight, http.StatusNoContent, true, false},
		{"preflight from a listed origin", http.MethodOptions, "https://APP.example", "", "", preflight, http.StatusNoContent, true, false},
		{"preflight from a foreign origin", http.MethodOptions, "http://evil.example", "", "", preflight, http.StatusForbidden, false, false},
		{"initialize from a loopback origin", http.MethodPost, "http://localhost:6274", token, initialize, nil, http.StatusOK, true, true},
		{"initialize from a listed origin", http.MethodPost, "https://app.example", token, initialize, nil, http.StatusOK, true, true},
		{"no token from a listed origin", http.MethodPost, "https://app.example", "", initialize, nil, http.StatusUnauthorized, true, false},
		{"initialize from a foreign origin", http.MethodPost, "http://evil.example", token, initialize, nil, http.StatusForbidden, false, false},
		{"OPTIONS that is no preflight", http.MethodOptions, "http://localhost:6274", token, "", nil, http.StatusMethodNotAllowed, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reached = 0
			r := httptest.NewRequest(tt.method, httpEndpoint, strings.NewReader(tt.body))
			r.Host = "127.0.0.1:8808"
			r.Header.Set("Origin", tt.origin)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Accept", "application/json, text/event-stream")
			if tt.token != "" {
				r.Header.Set("Authorization", "Bearer "+tt.token)
			}
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			guard.ServeHTTP(w, r)
			h := w.Result().Header
			if w.Code != tt.want {
				t.Fatalf("got status %d (%s); want %d", w.Code, w.Body, tt.want)
			}
			if got := reached > 0; got != tt.wantReached {
				t.Errorf("reached the transport: got %v; want %v", got, tt.wantReached)
			}
			if got := h.Get("Access-Control-Allow-Origin"); (got == tt.origin) != tt.wantCORS || (got != "" && !tt.wantCORS) {
				t.Errorf("Access-Control-Allow-Origin: got %q; want the origin: %v", got, tt.wantCORS)
			}
			if !tt.wantCORS {
				return
			}
			if got := h.Values("Vary"); !strings.Contains(strings.Join(got, ","), "Origin") {
				t.Errorf("Vary: got %q; want Origin", got)
			}
			if got, want := h.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id, WWW-Authenticate"; tt.method == http.MethodPost && got != want {
				t.Errorf("Access-Control-Expose-Headers: got %q; want %q", got, want)
			}
			if tt.header == nil {
				return
			}
			for _, want := range []string{"GET", "POST", "DELETE"} {
				if got := h.Get("Access-Control-Allow-Methods"); !strings.Contains(got, want) {
					t.Errorf("Access-Control-Allow-Methods: got %q; want it to list %s", got, want)
				}
			}
			allowed := strings.ToLower(h.Get("Access-Control-Allow-Headers"))
			for _, want := range []string{"authorization", "content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id", "mcp-method", "mcp-name"} {
				if !strings.Contains(allowed, want) {
					t.Errorf("Access-Control-Allow-Headers: got %q; want it to list %s", allowed, want)
				}
			}
			if h.Get("Access-Control-Max-Age") == "" {
				t.Errorf("Access-Control-Max-Age: got none; want one")
			}
		})
	}
	if held := s.t.sessionQuota.held(); held != 2 {
		t.Errorf("sessions: got %d; want 2 (the two allowed initializes)", held)
	}
}
