package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// registrySchemaSHA256 pins testdata/registry/server.schema.json to the
// registry's published 2025-12-11 schema (testdata/registry/README.md).
const registrySchemaSHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"

// bundlePlatforms are the platforms that get an MCPB bundle: MCPB knows
// darwin, linux and win32 only, so FreeBSD has its archive alone.
var bundlePlatforms = []string{"darwin-amd64", "darwin-arm64", "linux-amd64", "linux-arm64", "windows-amd64", "windows-arm64"}

// releasePlatforms are every platform `make release` builds.
var releasePlatforms = append(slices.Clone(bundlePlatforms), "freebsd-amd64", "freebsd-arm64")

// versionFile returns the release the VERSION file names.
func versionFile(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(text))
}

// registrySchema loads the registry's schema and checks it is the pinned one.
func registrySchema(t *testing.T) jsonSchema {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", "registry", "server.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(text); hex.EncodeToString(sum[:]) != registrySchemaSHA256 {
		t.Fatalf("testdata/registry/server.schema.json: got sha256 %x; want %s (the published schema, unedited)", sum, registrySchemaSHA256)
	}
	root, err := decodeSchemaJSON(text)
	if err != nil {
		t.Fatal(err)
	}
	return jsonSchema{root: root.(map[string]any)}
}

// readJSONFile decodes a JSON file into a generic value.
func readJSONFile(t *testing.T, path string) any {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeSchemaJSON(text)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestVersionDefaultIsVersionFile checks that a build without -ldflags (go
// install) reports the release the VERSION file names, as `make` stamps it.
func TestVersionDefaultIsVersionFile(t *testing.T) {
	if want := versionFile(t); version != want {
		t.Errorf("main.version default: got %q; want the VERSION file's %q", version, want)
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(version) {
		t.Errorf("version %q: want MAJOR.MINOR.PATCH", version)
	}
}

// TestServerJSONMatchesRegistrySchema validates the top-level server.json
// against the registry's schema, and shows that the validator catches what
// the registry would refuse.
func TestServerJSONMatchesRegistrySchema(t *testing.T) {
	schema := registrySchema(t)
	if errs := schema.validate(readJSONFile(t, "server.json")); len(errs) > 0 {
		t.Fatalf("server.json does not match the registry schema:\n%s", strings.Join(errs, "\n"))
	}
	for _, tc := range []struct {
		name   string
		change func(doc map[string]any)
		want   string
	}{
		{"description over 100 characters", func(d map[string]any) { d["description"] = strings.Repeat("é", 101) }, "maxLength 100"},
		{"name without a namespace", func(d map[string]any) { d["name"] = "crosstalk-mcp" }, "does not match"},
		{"no version", func(d map[string]any) { delete(d, "version") }, `missing required "version"`},
		{"checksum not hex", func(d map[string]any) { firstPackage(d)["fileSha256"] = "XYZ" }, "does not match ^[a-f0-9]{64}$"},
		{"package without a transport", func(d map[string]any) { delete(firstPackage(d), "transport") }, `missing required "transport"`},
		{"remote that is not HTTP", func(d map[string]any) { d["remotes"].([]any)[0].(map[string]any)["url"] = "ftp://x/mcp" }, "matches none of anyOf"},
		{"isSecret that is not a boolean", func(d map[string]any) {
			d["remotes"].([]any)[0].(map[string]any)["headers"].([]any)[0].(map[string]any)["isSecret"] = "yes"
		}, "want boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := readJSONFile(t, "server.json").(map[string]any)
			tc.change(doc)
			errs := strings.Join(schema.validate(doc), "\n")
			if !strings.Contains(errs, tc.want) {
				t.Errorf("got errors %q; want one containing %q", errs, tc.want)
			}
		})
	}
}

// firstPackage returns server.json's first package, for the cases above.
func firstPackage(doc map[string]any) map[string]any {
	return doc["packages"].([]any)[0].(map[string]any)
}

// registryEntry is the part of server.json the release checks read.
type registryEntry struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Version     string `json:"version"`
	Packages    []struct {
		RegistryType string `json:"registryType"`
		Identifier   string `json:"identifier"`
		Version      string `json:"version"`
		FileSHA256   string `json:"fileSha256"`
		Transport    struct {
			Type string `json:"type"`
		} `json:"transport"`
	} `json:"packages"`
	Remotes []struct {
		Type    string `json:"type"`
		URL     string `json:"url"`
		Headers []struct {
			Name     string `json:"name"`
			Value    string `json:"value"`
			IsSecret bool   `json:"isSecret"`
		} `json:"headers"`
	} `json:"remotes"`
}

// readRegistryEntry decodes a server.json.
func readRegistryEntry(t *testing.T, path string) registryEntry {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e registryEntry
	if err := json.Unmarshal(text, &e); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return e
}

// TestServerJSONDescribesRelease checks what the schema cannot: that
// server.json names this module and VERSION's release, lists one stdio bundle
// per bundled platform on the release page, and offers serve --http as a
// remote whose bearer token is a secret.
func TestServerJSONDescribesRelease(t *testing.T) {
	e := readRegistryEntry(t, "server.json")
	checkRegistryEntry(t, e, versionFile(t))
}

// checkRegistryEntry checks a server.json's entry for release v.
func checkRegistryEntry(t *testing.T, e registryEntry, v string) {
	t.Helper()
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module github\.com/(\S+)$`).FindSubmatch(gomod)
	if module == nil {
		t.Fatal("go.mod: no github.com module path")
	}
	owner, repo, _ := strings.Cut(string(module[1]), "/")
	if want := "io.github." + owner + "/" + repo; e.Name != want {
		t.Errorf("name: got %q; want %q (from the module path)", e.Name, want)
	}
	if e.Version != v {
		t.Errorf("version: got %q; want %q", e.Version, v)
	}
	var platforms []string
	page := "https://github.com/" + string(module[1]) + "/releases/download/v" + v + "/crosstalk-mcp-" + v + "-"
	for _, p := range e.Packages {
		platform, ok := strings.CutPrefix(p.Identifier, page)
		platform, isBundle := strings.CutSuffix(platform, ".mcpb")
		if p.RegistryType != "mcpb" || !ok || !isBundle || !strings.Contains(p.Identifier, "mcp") {
			t.Errorf("package %s %s: want an mcpb bundle under %s", p.RegistryType, p.Identifier, page)
		}
		if p.Version != v || p.Transport.Type != "stdio" || len(p.FileSHA256) != 64 {
			t.Errorf("package %s: got version %q, transport %q, fileSha256 %q; want %s, stdio, a checksum", p.Identifier, p.Version, p.Transport.Type, p.FileSHA256, v)
		}
		platforms = append(platforms, platform)
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, bundlePlatforms) {
		t.Errorf("bundles: got %v; want %v", platforms, bundlePlatforms)
	}
	if len(e.Remotes) != 1 || e.Remotes[0].Type != "streamable-http" || !strings.HasSuffix(e.Remotes[0].URL, "/mcp") {
		t.Fatalf("remotes: got %+v; want one streamable-http remote at /mcp (serve --http)", e.Remotes)
	}
	h := e.Remotes[0].Headers
	if len(h) != 1 || h[0].Name != "Authorization" || !h[0].IsSecret || !strings.HasPrefix(h[0].Value, "Bearer {") {
		t.Errorf("remote headers: got %+v; want a secret Authorization: Bearer {token}", h)
	}
}

// TestReleaseScriptKeepsForeignOutdir checks that scripts/release.sh, which
// empties OUTDIR, refuses one holding anything a release does not write,
// even beside a bin/ folder: a home directory or an install prefix such as
// /usr/local has one too.
func TestReleaseScriptKeepsForeignOutdir(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run scripts/release.sh")
	}
	for _, tc := range []struct {
		name  string
		files []string
	}{
		{"home directory", []string{"bin/mytool", "notes.txt"}},
		{"foreign file in bin", []string{"bin/mytool", "SHA256SUMS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			for _, f := range tc.files {
				path := filepath.Join(out, f)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte("keep me\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("sh", filepath.Join("scripts", "release.sh"), "0.0.1", out, "linux/amd64")
			cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1")
			stdout, err := cmd.CombinedOutput()
			if err == nil {
				t.Errorf("release.sh: got success; want a refusal\n%s", stdout)
			}
			for _, f := range tc.files {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("%s: got %v; want it left in place", f, err)
				}
			}
		})
	}
}
