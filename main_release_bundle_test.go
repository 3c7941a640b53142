package main

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// builtRelease returns the version dist/ was built for by `make release`
// (or release-check, which `make test` runs before the Go tests), or skips
// the test when dist/ holds no release. Under CI (CI set, as .ci/run does)
// a missing release fails instead: make test must have built it.
func builtRelease(t *testing.T) string {
	t.Helper()
	path := filepath.Join("dist", "server.json")
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("dist/ holds no release (%v), and under CI make test builds it before the Go tests", err)
		}
		t.Skipf("dist/ holds no release (%v): run `make release`; `make test` builds it before the Go tests", err)
	}
	return readRegistryEntry(t, path).Version
}

// releaseFileSHA256 returns a file's hex SHA-256.
func releaseFileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TestReleaseChecksums checks dist/: SHA256SUMS lists exactly the archives
// and bundles, with their checksums, and dist/server.json is a valid
// registry entry whose fileSha256 values are the bundles'.
func TestReleaseChecksums(t *testing.T) {
	v := builtRelease(t)
	if errs := registrySchema(t).validate(readJSONFile(t, filepath.Join("dist", "server.json"))); len(errs) > 0 {
		t.Fatalf("dist/server.json does not match the registry schema:\n%s", strings.Join(errs, "\n"))
	}
	entry := readRegistryEntry(t, filepath.Join("dist", "server.json"))
	checkRegistryEntry(t, entry, v)
	for _, p := range entry.Packages {
		if got := releaseFileSHA256(t, filepath.Join("dist", filepath.Base(p.Identifier))); got != p.FileSHA256 {
			t.Errorf("%s: got sha256 %s; server.json says %s", p.Identifier, got, p.FileSHA256)
		}
	}
	sums, err := os.ReadFile(filepath.Join("dist", "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed, want []string
	for _, line := range strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || releaseFileSHA256(t, filepath.Join("dist", name)) != sum {
			t.Errorf("SHA256SUMS line %q: want the file's sha256, two spaces, its name", line)
		}
		listed = append(listed, name)
	}
	for _, p := range releasePlatforms {
		want = append(want, releaseArchive(v, p))
		if slices.Contains(bundlePlatforms, p) {
			want = append(want, "crosstalk-mcp-"+v+"-"+p+".mcpb")
		}
	}
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists %v; want %v", listed, want)
	}
}

// releaseArchive names a platform's archive: .zip for Windows, else .tar.gz.
func releaseArchive(v, platform string) string {
	if strings.HasPrefix(platform, "windows-") {
		return "crosstalk-mcp-" + v + "-" + platform + ".zip"
	}
	return "crosstalk-mcp-" + v + "-" + platform + ".tar.gz"
}

// archiveMember is one file of a release archive as the archive records it.
type archiveMember struct {
	name  string
	mode  os.FileMode
	mtime time.Time
	owner int
	data  []byte
}

// TestReleaseArchives opens every archive: it holds the platform's binary
// (byte for byte dist/bin's), LICENSE and README.md under one directory,
// owned by 0:0, with one modification time for all, and the binary is an
// executable of its platform's format and architecture, statically linked on
// Linux and FreeBSD.
func TestReleaseArchives(t *testing.T) {
	v := builtRelease(t)
	for _, platform := range releasePlatforms {
		t.Run(platform, func(t *testing.T) {
			members := readArchive(t, filepath.Join("dist", releaseArchive(v, platform)))
			exe := "crosstalk-mcp"
			if strings.HasPrefix(platform, "windows-") {
				exe += ".exe"
			}
			dir := "crosstalk-mcp-" + v + "-" + platform + "/"
			var names []string
			for _, m := range members {
				names = append(names, m.name)
				if m.owner != 0 || !m.mtime.Equal(members[0].mtime) {
					t.Errorf("%s: owner %d, mtime %v; want 0 and the first entry's %v", m.name, m.owner, m.mtime, members[0].mtime)
				}
			}
			if want := []string{dir, dir + "LICENSE", dir + "README.md", dir + exe}; !slices.Equal(names, want) {
				t.Fatalf("members: got %v; want %v", names, want)
			}
			binary := members[3]
			built, err := os.ReadFile(filepath.Join("dist", "bin", "crosstalk-mcp-"+platform+strings.TrimPrefix(exe, "crosstalk-mcp")))
			if err != nil {
				t.Fatal(err)
			}
			if binary.mode != 0o755 || !bytes.Equal(binary.data, built) {
				t.Errorf("%s: mode %v, %d bytes; want 0755 and dist/bin's %d bytes", binary.name, binary.mode, len(binary.data), len(built))
			}
			if err := checkExecutable(platform, binary.data); err != nil {
				t.Error(err)
			}
		})
	}
}

// readArchive lists a .tar.gz or .zip archive's members in archive order.
func readArchive(t *testing.T, path string) []archiveMember {
	t.Helper()
	if strings.HasSuffix(path, ".zip") || strings.HasSuffix(path, ".mcpb") {
		return readZip(t, path)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !gz.ModTime.IsZero() || gz.Name != "" {
		t.Errorf("%s: gzip header has time %v, name %q; want neither", path, gz.ModTime, gz.Name)
	}
	var members []archiveMember
	for tr := tar.NewReader(gz); ; {
		hdr, err := tr.Next()
		if err == io.EOF {
			return members
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, archiveMember{hdr.Name, os.FileMode(hdr.Mode).Perm(), hdr.ModTime, hdr.Uid + hdr.Gid, data})
	}
}

// readZip lists a zip archive's members; zip records no owner.
func readZip(t *testing.T, path string) []archiveMember {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var members []archiveMember
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, archiveMember{f.Name, f.Mode().Perm(), f.Modified, 0, data})
	}
	return members
}

// checkExecutable checks that data is an executable of the platform's
// format and architecture and, for ELF, that it needs no interpreter and no
// shared library (statically linked).
func checkExecutable(platform string, data []byte) error {
	goos, goarch, _ := strings.Cut(platform, "-")
	r := bytes.NewReader(data)
	switch goos {
	case "linux", "freebsd":
		f, err := elf.NewFile(r)
		if err != nil {
			return fmt.Errorf("%s: not ELF: %w", platform, err)
		}
		libs, _ := f.ImportedLibraries()
		wantABI := map[string]elf.OSABI{"linux": elf.ELFOSABI_NONE, "freebsd": elf.ELFOSABI_FREEBSD}[goos]
		wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		interp := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
		if f.Machine != wantMachine || f.OSABI != wantABI || f.Type != elf.ET_EXEC || interp || len(libs) > 0 {
			return fmt.Errorf("%s: ELF %v %v %v, interpreter %v, libraries %v; want %v %v ET_EXEC, static", platform, f.Machine, f.OSABI, f.Type, interp, libs, wantMachine, wantABI)
		}
	case "darwin":
		f, err := macho.NewFile(r)
		if err != nil {
			return fmt.Errorf("%s: not Mach-O: %w", platform, err)
		}
		if want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]; f.Cpu != want || f.Type != macho.TypeExec {
			return fmt.Errorf("%s: Mach-O %v %v; want %v executable", platform, f.Cpu, f.Type, want)
		}
	case "windows":
		f, err := pe.NewFile(r)
		if err != nil {
			return fmt.Errorf("%s: not PE: %w", platform, err)
		}
		want := map[string]uint16{"amd64": pe.IMAGE_FILE_MACHINE_AMD64, "arm64": pe.IMAGE_FILE_MACHINE_ARM64}[goarch]
		if f.Machine != want || f.Characteristics&pe.IMAGE_FILE_EXECUTABLE_IMAGE == 0 {
			return fmt.Errorf("%s: PE machine %#x, characteristics %#x; want %#x, executable", platform, f.Machine, f.Characteristics, want)
		}
	default:
		return fmt.Errorf("%s: unknown platform", platform)
	}
	return nil
}

// bundleManifest is the part of an MCPB manifest.json the bundle test uses.
type bundleManifest struct {
	ManifestVersion string `json:"manifest_version"`
	Name            string `json:"name"`
	Version         string `json:"version"`
	Server          struct {
		Type       string `json:"type"`
		EntryPoint string `json:"entry_point"`
		MCPConfig  struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcp_config"`
	} `json:"server"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Compatibility struct {
		Platforms []string `json:"platforms"`
	} `json:"compatibility"`
	UserConfig map[string]struct {
		Type    string `json:"type"`
		Default any    `json:"default"`
	} `json:"user_config"`
}

// TestReleaseBundleServesTools installs this machine's bundle the way an
// MCPB client does (MANIFEST.md of github.com/anthropics/mcpb, manifest
// 0.3): it unpacks the .mcpb, fills the manifest's variables with the
// extension's directory, HOME and each user setting's default, starts the
// command it names with its arguments and environment, and lists the tools
// over stdio. The settings must reach the server: the default groups
// directory is created under HOME, with auditing on.
func TestReleaseBundleServesTools(t *testing.T) {
	v := builtRelease(t)
	platform := runtime.GOOS + "-" + runtime.GOARCH
	if !slices.Contains(bundlePlatforms, platform) {
		t.Skipf("no MCPB bundle for %s: MCPB knows darwin, linux and win32 only", platform)
	}
	dir := unpackBundle(t, filepath.Join("dist", "crosstalk-mcp-"+v+"-"+platform+".mcpb"))
	text, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m bundleManifest
	if err := json.Unmarshal(text, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	checkManifest(t, m, v)
	home := t.TempDir()
	command, args, env := bundleCommand(t, m, dir, home)
	info, tools := listToolsOverStdio(t, command, args, env)
	if info != v {
		t.Errorf("serverInfo.version: got %q; want %q", info, v)
	}
	var listed, want []string
	for _, tool := range m.Tools {
		listed = append(listed, tool.Name)
	}
	for name := range toolSchemas {
		want = append(want, name)
	}
	slices.Sort(tools)
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(tools, want) || !slices.Equal(listed, want) {
		t.Errorf("tools: the bundled server lists %v, the manifest %v; want %v", tools, listed, want)
	}
	catalog := openTestDB(t, filepath.Join(home, ".cache", "crosstalk", catalogFileName), "ro")
	// Only with CROSSTALK_OBSERVABILITY_RETENTION_DAYS set does the server
	// create the audit schema in the catalog.
	if got := queryRows(t, catalog, "SELECT name FROM sqlite_master WHERE name = 'tool_calls'"); !slices.Equal(got, []string{"tool_calls"}) {
		t.Errorf("catalog tables named tool_calls in the default groups directory: got %v; want the audit's", got)
	}
}

// unpackBundle extracts a bundle into a temporary directory, keeping each
// file's mode, and returns the directory.
func unpackBundle(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range readZip(t, path) {
		if strings.HasSuffix(m.name, "/") {
			continue
		}
		file := filepath.Join(dir, filepath.FromSlash(m.name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, m.data, m.mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bundleCommand returns the command line and environment a client runs for
// the manifest unpacked in dir, with HOME at home: the test's environment
// without its CROSSTALK_ variables, plus the manifest's.
func bundleCommand(t *testing.T, m bundleManifest, dir, home string) (string, []string, []string) {
	t.Helper()
	expand := manifestExpander(t, m, dir, home)
	command := expand(m.Server.MCPConfig.Command)
	if runtime.GOOS == "windows" {
		command += ".exe" // MANIFEST.md: clients append .exe to a binary's command on Windows.
	}
	if want := filepath.Join(dir, filepath.FromSlash(m.Server.EntryPoint)); filepath.Clean(command) != want {
		t.Errorf("command %s: want the entry point %s", command, want)
	}
	var args, env []string
	for _, a := range m.Server.MCPConfig.Args {
		args = append(args, expand(a))
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CROSSTALK_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "USERPROFILE=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "USERPROFILE="+home)
	for _, name := range sortedKeys(anyMap(m.Server.MCPConfig.Env)) {
		env = append(env, name+"="+expand(m.Server.MCPConfig.Env[name]))
	}
	return command, args, env
}

// anyMap turns a map of strings into one of values, for sortedKeys.
func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// checkManifest checks the manifest fields an MCPB client relies on, and
// that the three settings map to the server's environment variables.
func checkManifest(t *testing.T, m bundleManifest, v string) {
	t.Helper()
	mcpbPlatform := map[string]string{"darwin": "darwin", "linux": "linux", "windows": "win32"}[runtime.GOOS]
	if m.ManifestVersion != "0.3" || m.Name != "crosstalk-mcp" || m.Version != v || m.Server.Type != "binary" ||
		!slices.Equal(m.Compatibility.Platforms, []string{mcpbPlatform}) {
		t.Errorf("manifest: got version %s, name %s, release %s, server type %s, platforms %v; want 0.3, crosstalk-mcp, %s, binary, [%s]",
			m.ManifestVersion, m.Name, m.Version, m.Server.Type, m.Compatibility.Platforms, v, mcpbPlatform)
	}
	want := map[string]string{
		"CROSSTALK_GROUPS_DIR":                   "${user_config.groups_dir}",
		"CROSSTALK_POLL_INTERVAL_SECONDS":        "${user_config.poll_interval_seconds}",
		"CROSSTALK_OBSERVABILITY_RETENTION_DAYS": "${user_config.audit_retention_days}",
	}
	if fmt.Sprint(m.Server.MCPConfig.Env) != fmt.Sprint(want) || len(m.UserConfig) != len(want) {
		t.Errorf("environment: got %v with settings %v; want %v", m.Server.MCPConfig.Env, m.UserConfig, want)
	}
}

// manifestExpander returns a function that fills a manifest string's
// variables as a client does before running the server, each user setting
// taking its default.
func manifestExpander(t *testing.T, m bundleManifest, dir, home string) func(string) string {
	vars := map[string]string{"${__dirname}": dir, "${HOME}": home, "${/}": string(filepath.Separator), "${pathSeparator}": string(filepath.Separator)}
	var expand func(string) string
	expand = func(s string) string {
		for name, value := range vars {
			s = strings.ReplaceAll(s, name, value)
		}
		for key, setting := range m.UserConfig {
			placeholder := "${user_config." + key + "}"
			if strings.Contains(s, placeholder) {
				s = strings.ReplaceAll(s, placeholder, expand(fmt.Sprint(setting.Default)))
			}
		}
		if strings.Contains(s, "${") {
			t.Fatalf("manifest value %q has a variable no client fills", s)
		}
		return s
	}
	return expand
}

// listToolsOverStdio runs the server with the given command line and
// environment, sends initialize and tools/list, closes stdin, and returns
// serverInfo.version and the listed tool names once the server has exited.
func listToolsOverStdio(t *testing.T, command string, args, env []string) (string, []string) {
	t.Helper()
	// The server answers in milliseconds; a minute covers a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bundle-test","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\nstderr: %s", command, args, err, stderr.String())
	}
	var version string
	var tools []string
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		var msg struct {
			ID     int `json:"id"`
			Result struct {
				ServerInfo struct {
					Version string `json:"version"`
				} `json:"serverInfo"`
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			} `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("stdout line %q: %v", sc.Text(), err)
		}
		version += msg.Result.ServerInfo.Version
		for _, tool := range msg.Result.Tools {
			tools = append(tools, tool.Name)
		}
	}
	return version, tools
}
