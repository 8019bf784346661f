package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// minFree is the space an import leaves on the store's file system: it
// stops before the disk is that full.
const minFree = 256 << 20

// ImportOptions tune Import.
type ImportOptions struct {
	// Tags are the tags of the new template ("default" when none).
	Tags []string
	// Username and Password authenticate to the registry, when set.
	Username, Password string
	// Insecure allows plain HTTP to a registry that is not on loopback
	// (loopback and private addresses use HTTP already, as Docker does).
	Insecure bool
	// Platform picks an image of a multi-platform index, as "os/arch";
	// empty means this host's (linux/amd64 here).
	Platform string
	// Progress receives the import's log, a line at a time; nil discards it.
	Progress io.Writer
	// Config, when not nil, is applied over the image's config (the E2B
	// build API and the CLI's flags set user, workdir, start command).
	Config func(*Config)
	// RegistryOnly takes source as a registry reference only, never as a
	// path on this host (the API's fromImage: a tenant names no files).
	RegistryOnly bool
	// PublicOnly refuses registries at loopback, private, link-local and
	// other non-public addresses (checked at each connection, so a name
	// that resolves to one is refused too), except those in Allow
	// ("host:port" as the reference writes it, or "host" for every port):
	// from the API, a pull is
	// the server's own request, and must not reach the host's or its
	// network's services.
	PublicOnly bool
	Allow      []string
}

// ImageSource is where an image comes from.
type ImageSource struct {
	Ref string // a registry reference, an archive path or a layout directory
}

// Import makes template name from an OCI image and returns its build.
// source is a registry reference (docker.io/library/python:3.12,
// localhost:5000/x:1, ghcr.io/o/i@sha256:...), the path of a `docker save`
// archive, or the path of an OCI image layout directory. Layers already in
// the store are not fetched again; one that fails half-way is fetched
// again whole the next time (the layers done before it are kept). The
// image's Env, WorkingDir, User and Entrypoint/Cmd become the template's
// defaults. Nothing is registered unless every layer unpacked.
func (s *Store) Import(ctx context.Context, tplName, source string, opts ImportOptions) (*Template, error) {
	if !ValidName(tplName) {
		return nil, fmt.Errorf("template name %q: %w", tplName, errdefs.ErrInvalidArgument)
	}
	img, desc, err := openImage(ctx, source, opts)
	if err != nil {
		return nil, err
	}
	layers, err := s.ImportLayers(ctx, img, desc, opts.Progress)
	if err != nil {
		return nil, err
	}
	cfg, err := ImageConfig(img)
	if err != nil {
		return nil, err
	}
	cfg.Source = desc
	if opts.Config != nil {
		opts.Config(&cfg)
	}
	t, err := s.Commit(tplName, opts.Tags, layers, cfg)
	if err != nil {
		return nil, err
	}
	// The layers are the template's now: the cache entries ImportLayers
	// made for a retry would keep them a day after the template is
	// removed, and `hutch template rm` frees the disk of its own layers.
	for _, id := range layers {
		s.cacheDrop(id, id)
	}
	progressf(opts.Progress, "template %s: %d layer(s) from %s", t.Ref(), len(layers), desc)
	return t, nil
}

func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// OpenImage resolves source (see Import) to an image, and says which in
// one line ("localhost:5000/x:1@sha256:...").
func OpenImage(ctx context.Context, source string, opts ImportOptions) (v1.Image, string, error) {
	return openImage(ctx, source, opts)
}

func openImage(ctx context.Context, source string, opts ImportOptions) (v1.Image, string, error) {
	plat := v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}
	if opts.Platform != "" {
		p, err := v1.ParsePlatform(opts.Platform)
		if err != nil {
			return nil, "", fmt.Errorf("platform %q: %w: %w", opts.Platform, err, errdefs.ErrInvalidArgument)
		}
		plat = *p
	}
	if fi, err := os.Stat(source); err == nil && !opts.RegistryOnly {
		if fi.IsDir() {
			return openLayout(source, plat)
		}
		img, err := tarball.ImageFromPath(source, nil)
		if err != nil {
			return nil, "", fmt.Errorf("image archive %s (as `docker save` writes one): %w: %w", source, err, errdefs.ErrInvalidArgument)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, "", fmt.Errorf("image archive %s: %w: %w", source, err, errdefs.ErrInvalidArgument)
		}
		return img, source + "@" + d.String(), nil
	}
	var nopts []name.Option
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.ParseReference(source, nopts...)
	if err != nil {
		return nil, "", fmt.Errorf("image %q is neither a file, a directory nor an image reference: %w: %w", source, err, errdefs.ErrInvalidArgument)
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(plat), remote.WithUserAgent("hutch")}
	if opts.PublicOnly && !allowed(opts.Allow, ref.Context().RegistryStr()) {
		ropts = append(ropts, remote.WithTransport(publicTransport()))
	}
	if opts.Username != "" || opts.Password != "" {
		ropts = append(ropts, remote.WithAuth(&authn.Basic{Username: opts.Username, Password: opts.Password}))
	} else {
		ropts = append(ropts, remote.WithAuth(authn.Anonymous))
	}
	rd, err := remote.Get(ref, ropts...)
	if err != nil {
		return nil, "", registryError(source, err)
	}
	// An index is resolved as a layout's is: a platform it lacks is not
	// found, and the error lists those it has.
	var img v1.Image
	if rd.MediaType.IsIndex() {
		idx, err := rd.ImageIndex()
		if err == nil {
			img, err = pickImage(idx, plat, 0)
		}
		if err != nil {
			return nil, "", fmt.Errorf("image %s: %w", source, err)
		}
	} else if img, err = rd.Image(); err != nil {
		return nil, "", registryError(source, err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, "", registryError(source, err)
	}
	return remoteImage{img}, ref.Context().Name() + "@" + d.String(), nil
}

// registryError maps a registry's answer onto the error kinds the API
// reports: an unknown image is not found, bad credentials are refused.
func registryError(source string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case 404:
			return fmt.Errorf("image %s: not found in its registry: %w", source, errdefs.ErrNotFound)
		case 401, 403:
			return fmt.Errorf("image %s: the registry refused access (give a username and password): %w", source, errdefs.ErrInvalidArgument)
		}
		for _, d := range te.Errors {
			if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
				return fmt.Errorf("image %s: not found in its registry: %w", source, errdefs.ErrNotFound)
			}
		}
	}
	return fmt.Errorf("image %s: %w", source, err)
}

// openLayout picks the image for plat out of an OCI image layout.
func openLayout(dir string, plat v1.Platform) (v1.Image, string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("OCI image layout %s: %w: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, "", fmt.Errorf("OCI image layout %s: %w: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	img, err := pickImage(idx, plat, 0)
	if err != nil {
		return nil, "", fmt.Errorf("OCI image layout %s: %w", dir, err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, "", fmt.Errorf("OCI image layout %s: %w: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	return img, dir + "@" + d.String(), nil
}

// pickImage finds the image for plat in idx, through nested indexes; an
// index of one image without a platform is taken as it is.
func pickImage(idx v1.ImageIndex, plat v1.Platform, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, fmt.Errorf("image indexes nested too deep: %w", errdefs.ErrInvalidArgument)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	var seen []string
	for _, d := range m.Manifests {
		if d.Platform != nil {
			seen = append(seen, d.Platform.String())
		}
		if d.Platform != nil && !d.Platform.Satisfies(plat) {
			continue
		}
		if d.Platform == nil && len(m.Manifests) > 1 && !d.MediaType.IsIndex() {
			continue
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
			}
			if img, err := pickImage(child, plat, depth+1); err == nil {
				return img, nil
			}
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
		return img, nil
	}
	return nil, fmt.Errorf("no image for %s (the index has %s): %w", plat.String(), strings.Join(seen, ", "), errdefs.ErrNotFound)
}

// maxConfigSize bounds an image's config blob: go-containerregistry reads
// it whole, at whatever size the manifest declares, and a registry serving
// a 1.5 GB config took the server to 6 GB (review 27 round 2, G8). Real
// configs are kilobytes; a long history, a few hundred.
const maxConfigSize = 4 << 20

// configFile is img's config, refused past maxConfigSize before it is
// read.
func configFile(img v1.Image) (*v1.ConfigFile, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if m.Config.Size > maxConfigSize || m.Config.Size < 0 {
		return nil, fmt.Errorf("the image's config is %d bytes, past the %d this server reads: %w", m.Config.Size, maxConfigSize, errdefs.ErrInvalidArgument)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	return cf, nil
}

// ImportLayers puts img's layers into the store, fetching only those it
// lacks, and returns their ids, bottom first. Each is checked against the
// diff id the image's config names. desc names the image in the log.
func (s *Store) ImportLayers(ctx context.Context, img v1.Image, desc string, progress io.Writer) ([]string, error) {
	cf, err := configFile(img)
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", desc, err)
	}
	if cf.OS != "" && cf.OS != "linux" {
		return nil, fmt.Errorf("image %s is for %s, not linux: %w", desc, cf.OS, errdefs.ErrInvalidArgument)
	}
	ls, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image %s: layers: %w: %w", desc, err, errdefs.ErrInvalidArgument)
	}
	if len(ls) != len(cf.RootFS.DiffIDs) {
		return nil, fmt.Errorf("image %s: %d layers but %d diff ids in its config: %w", desc, len(ls), len(cf.RootFS.DiffIDs), errdefs.ErrInvalidArgument)
	}
	if err := s.init(); err != nil {
		return nil, err
	}
	// Refuse at once what cannot fit: the compressed sizes are a floor.
	var need int64
	for i, l := range ls {
		if s.HasLayer(cf.RootFS.DiffIDs[i].Hex) {
			continue
		}
		if n, err := l.Size(); err == nil {
			need += n
		}
	}
	free, err := freeBytes(s.dir)
	if err == nil && need+minFree > free {
		return nil, fmt.Errorf("image %s needs at least %d MiB free (its compressed layers and %d MiB to spare) and the template store has %d MiB: %w", desc, (need+minFree)>>20, minFree>>20, free>>20, errdefs.ErrResourceExhausted)
	}
	lease, err := s.NewLease()
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	ids := make([]string, len(ls))
	for i, l := range ls {
		want := cf.RootFS.DiffIDs[i]
		if want.Algorithm != "sha256" {
			return nil, fmt.Errorf("image %s: layer %d: diff id %s is not sha256: %w", desc, i+1, want, errdefs.ErrInvalidArgument)
		}
		ids[i] = want.Hex
		if have, err := s.Layer(want.Hex); err == nil {
			if !have.contentAddressed() {
				// Its id hashes the inputs of a build step, not a tar: an
				// image naming it must not get that layer's files.
				return nil, fmt.Errorf("image %s: layer %d: diff id %s names no image layer in the store: %w", desc, i+1, want, errdefs.ErrInvalidArgument)
			}
			lease.Add(want.Hex)
			progressf(progress, "layer %d/%d %.19s: already in the store", i+1, len(ls), want.String())
			continue
		}
		size, _ := l.Size()
		start := time.Now()
		progressf(progress, "layer %d/%d %.19s: fetching %s", i+1, len(ls), want.String(), mib(size))
		_, err := s.addLayer(lease, "oci "+want.String(), true, func(root string) (string, error) {
			rc, err := uncompressed(img, l)
			if err != nil {
				return "", fmt.Errorf("image %s: layer %d: %w", desc, i+1, err)
			}
			defer rc.Close()
			var in io.Reader = rc
			if progress != nil {
				in = &progressReader{r: rc, every: 2 * time.Second, last: time.Now(), report: func(n int64) {
					progressf(progress, "layer %d/%d: %s unpacked", i+1, len(ls), mib(n))
				}}
			}
			got, err := unpack(ctx, root, in, unpackOptions{
				warn: func(msg string) { progressf(progress, "layer %d/%d: %s", i+1, len(ls), msg) },
				room: func(int64) error { return room(root) },
			})
			if err != nil {
				return "", fmt.Errorf("image %s: layer %d/%d (%s): %w", desc, i+1, len(ls), want, err)
			}
			if got != want.Hex {
				return "", fmt.Errorf("image %s: layer %d/%d: content has sha256:%.12s, its config says %s (corrupt or truncated): %w", desc, i+1, len(ls), got, want, errdefs.ErrInvalidArgument)
			}
			return got, nil
		})
		if err != nil {
			return nil, err
		}
		// Kept a while even if this import fails later: a retry resumes
		// after the layers it already has.
		s.CachePut(want.Hex, want.Hex)
		progressf(progress, "layer %d/%d %.19s: done in %s", i+1, len(ls), want.String(), time.Since(start).Round(time.Millisecond))
	}
	return ids, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// ImageConfig turns an image's config into a template's: Env, WorkingDir
// and User as the defaults (root and / when the image sets none), and
// Entrypoint followed by Cmd as Cmd.
func ImageConfig(img v1.Image) (Config, error) {
	cf, err := configFile(img)
	if err != nil {
		return Config{}, fmt.Errorf("image config: %w", err)
	}
	c := cf.Config
	cfg := Config{
		DefaultUser:    c.User,
		DefaultWorkdir: c.WorkingDir,
		Env:            c.Env,
		Cmd:            append(append([]string{}, c.Entrypoint...), c.Cmd...),
		Entrypoint:     c.Entrypoint,
	}
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "root"
	}
	if cfg.DefaultWorkdir == "" {
		cfg.DefaultWorkdir = "/"
	}
	cfg.DefaultWorkdir = filepath.Clean("/" + cfg.DefaultWorkdir)
	return cfg, nil
}

// progressReader reports how much was read, at most every so often.
type progressReader struct {
	r      io.Reader
	n      int64
	every  time.Duration
	last   time.Time
	report func(n int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if now := time.Now(); now.Sub(p.last) >= p.every {
		p.last = now
		p.report(p.n)
	}
	return n, err
}

// publicTransport is go-containerregistry's default transport that
// reaches public addresses only: each connection is checked as it is
// dialled (so a name that resolves to a private address, and a redirect
// to one, are refused too), and when the host's HTTP proxy carries the
// request, the destination's addresses are checked before it is handed
// to the proxy.
func publicTransport() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	// The host's proxies are exempt from the check by address and port:
	// only the proxy itself, not the rest of its host (Go dials loopback
	// and NO_PROXY destinations directly, past the proxy).
	var proxies []string
	for _, env := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		u, err := url.Parse(os.Getenv(env))
		if err != nil || u.Host == "" {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"https": "443"}[u.Scheme]
			if port == "" {
				port = "80"
			}
		}
		addrs := []string{u.Hostname()}
		if _, err := netip.ParseAddr(u.Hostname()); err != nil {
			addrs, _ = net.LookupHost(u.Hostname()) // a proxy named, dialled by its addresses
		}
		for _, a := range addrs {
			proxies = append(proxies, net.JoinHostPort(a, port))
		}
	}
	proxy := t.Proxy
	t.Proxy = func(req *http.Request) (*url.URL, error) {
		u, err := proxy(req)
		if err != nil || u == nil {
			return u, err
		}
		ips, err := net.DefaultResolver.LookupNetIP(req.Context(), "ip", req.URL.Hostname())
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			if err := publicAddr(ip); err != nil {
				return nil, err
			}
		}
		return u, nil
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if slices.Contains(proxies, address) {
				return nil
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return err
			}
			return publicAddr(ip)
		}}
	t.DialContext = d.DialContext
	return t
}

// notPublic are the special-purpose ranges (IANA's registries) that are
// global unicast by Go's reckoning yet no public registry's address:
// shared address space (carrier-grade NAT, cloud metadata services),
// benchmarking, documentation, reserved, and the IPv6 prefixes that embed
// an IPv4 address (NAT64, 6to4, Teredo) or name none.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("192.88.99.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("::/96"),           // IPv4-compatible ::a.b.c.d
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("fec0::/10"),       // site-local
	netip.MustParsePrefix("2002::/16"),
}

// publicAddr refuses an address a registry on the Internet cannot have.
func publicAddr(ip netip.Addr) error {
	ip = ip.Unmap()
	ok := ip.IsGlobalUnicast() && !ip.IsPrivate()
	for _, p := range notPublic {
		if p.Contains(ip) {
			ok = false
		}
	}
	if ok {
		return nil
	}
	return fmt.Errorf("registry address %s is not a public one (loopback, private, link-local or special-purpose): the server's operator may allow it with hutch serve --registry-allow: %w", ip, errdefs.ErrPermissionDenied)
}

// allowed reports whether registry ("host[:port]") is in allow, by itself
// or by its host alone.
func allowed(allow []string, registry string) bool {
	if slices.Contains(allow, registry) {
		return true
	}
	host, _, err := net.SplitHostPort(registry)
	return err == nil && slices.Contains(allow, host)
}

// remoteImage marks an image read from a registry, whose layers are
// fetched compressed as they are stored (see uncompressed).
type remoteImage struct{ v1.Image }

// uncompressed opens layer l of img as a tar stream. A registry's gzip
// and zstd layers are decompressed with klauspost/compress, which unpacks
// gzip at about twice the speed of the standard library's that
// go-containerregistry uses (an import spent a third of its CPU there);
// the layer's content is checked against its diff id either way. Other
// images' layers (archives, layouts) go through go-containerregistry,
// which knows how each stores them.
func uncompressed(img v1.Image, l v1.Layer) (io.ReadCloser, error) {
	if _, ok := img.(remoteImage); !ok {
		return l.Uncompressed()
	}
	mt, err := l.MediaType()
	if err != nil {
		return nil, err
	}
	var open func(io.Reader) (io.ReadCloser, error)
	switch mt {
	case types.DockerLayer, types.OCILayer, types.DockerForeignLayer, types.OCIRestrictedLayer:
		open = func(r io.Reader) (io.ReadCloser, error) { return kgzip.NewReader(r) }
	case types.OCILayerZStd:
		open = func(r io.Reader) (io.ReadCloser, error) {
			d, err := zstd.NewReader(r)
			if err != nil {
				return nil, err
			}
			return d.IOReadCloser(), nil
		}
	default:
		return l.Uncompressed()
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	dec, err := open(rc)
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("decompress: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return struct {
		io.Reader
		io.Closer
	}{dec, closers{dec, rc}}, nil
}

// closers closes each of its members, in order.
type closers []io.Closer

func (c closers) Close() error {
	var errs []error
	for _, x := range c {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}
