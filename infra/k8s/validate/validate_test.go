package validate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
)

// Every kustomize target CI renders, and whether its inference replicas get GPUs. An overlay
// missing here fails the test: a new one must say what it expects.
var targets = map[string]struct{ gpu bool }{
	"base":         {gpu: true},
	"overlays/cpu": {gpu: false},
}

const (
	gpuResource = corev1.ResourceName("nvidia.com/gpu")
	// Time between the end of the drain and SIGKILL that the process needs to exit.
	exitMarginSeconds = 5
)

// The gRPC service each component serves; readiness probes ask for it by name.
var grpcServices = map[string]string{
	"inference": "loopwire.v1.InferenceService",
	"gateway":   "loopwire.v1.GatewayService",
	"harness":   "loopwire.v1.HarnessService",
}

// The kinds the manifests may use, each decoded strictly into its k8s.io/api type.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, true
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1/Ingress":
		return &networkingv1.Ingress{}, true
	}
	return nil, false
}

// drainSeconds is the servers' drain deadline after SIGTERM; the Python wrapper passes the
// value it reads from loopwire.common.grpc_server.serve.
func drainSeconds(t *testing.T) int32 {
	v := os.Getenv("LOOPWIRE_DRAIN_SECONDS")
	if v == "" {
		return 10
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("LOOPWIRE_DRAIN_SECONDS=%q: %v", v, err)
	}
	return int32(f + 0.999)
}

// workload is a Deployment or StatefulSet reduced to what the checks need.
type workload struct {
	kind, name, namespace string
	replicas              int32
	selector              *metav1.LabelSelector
	template              corev1.PodTemplateSpec
}

func (w workload) String() string { return w.kind + "/" + w.name }

func (w workload) component() string {
	return w.template.Labels["app.kubernetes.io/component"]
}

type rendered struct {
	objects      []any
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	pvcs         map[string]*corev1.PersistentVolumeClaim
	services     []*corev1.Service
	workloads    []workload
	statefulSets []*appsv1.StatefulSet
	pdbs         []*policyv1.PodDisruptionBudget
	ingresses    []*networkingv1.Ingress
}

// load renders one target and strictly decodes every object (unknown, duplicate or
// wrongly-cased fields are errors, as the API server's strict field validation makes them).
func load(t *testing.T, target string) *rendered {
	t.Helper()
	m, err := Render(filepath.Join("..", filepath.FromSlash(target)))
	if err != nil {
		t.Fatalf("kustomize %s: %v", target, err)
	}
	if out := os.Getenv("LOOPWIRE_K8S_RENDER_DIR"); out != "" {
		y, err := m.AsYaml()
		if err != nil {
			t.Fatal(err)
		}
		name := strings.ReplaceAll(target, "/", "-") + ".yaml"
		if err := os.WriteFile(filepath.Join(out, name), y, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &rendered{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		pvcs: map[string]*corev1.PersistentVolumeClaim{}}
	for _, res := range m.Resources() {
		id := res.GetKind() + "/" + res.GetName()
		obj, ok := newObject(res.GetApiVersion(), res.GetKind())
		if !ok {
			t.Errorf("%s: %s %s is not a kind these manifests may use", id, res.GetApiVersion(), res.GetKind())
			continue
		}
		data, err := res.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		strict, err := sigsjson.UnmarshalStrict(data, obj)
		if err != nil {
			t.Errorf("%s: does not decode into %T: %v", id, obj, err)
			continue
		}
		for _, e := range strict {
			t.Errorf("%s: %v", id, e)
		}
		checkMeta(t, id, res.GetKind(), obj)
		r.objects = append(r.objects, obj)
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *corev1.PersistentVolumeClaim:
			r.pvcs[o.Name] = o
		case *corev1.Service:
			r.services = append(r.services, o)
		case *appsv1.Deployment:
			r.workloads = append(r.workloads, workload{"Deployment", o.Name, o.Namespace, ptrOr(o.Spec.Replicas, 1),
				o.Spec.Selector, o.Spec.Template})
		case *appsv1.StatefulSet:
			r.statefulSets = append(r.statefulSets, o)
			r.workloads = append(r.workloads, workload{"StatefulSet", o.Name, o.Namespace, ptrOr(o.Spec.Replicas, 1),
				o.Spec.Selector, o.Spec.Template})
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *networkingv1.Ingress:
			r.ingresses = append(r.ingresses, o)
		}
	}
	if len(r.workloads) == 0 {
		t.Fatalf("%s renders no workloads", target)
	}
	return r
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// checkMeta applies the API server's name and label rules (apimachinery's validators).
func checkMeta(t *testing.T, id, kind string, obj any) {
	t.Helper()
	meta := obj.(metav1.Object)
	nameErrs := validation.IsDNS1123Subdomain(meta.GetName())
	if kind == "Service" {
		nameErrs = validation.IsDNS1035Label(meta.GetName())
	}
	for _, e := range nameErrs {
		t.Errorf("%s: name: %s", id, e)
	}
	for k, v := range meta.GetLabels() {
		for _, e := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
			t.Errorf("%s: label %s=%s: %s", id, k, v, e)
		}
	}
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// env is a container's environment as the kubelet assembles it: envFrom ConfigMaps, then env.
func env(t *testing.T, r *rendered, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			if cm, ok := r.configMaps[from.ConfigMapRef.Name]; ok {
				for k, v := range cm.Data {
					out[k] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func portOf(address string) string {
	return address[strings.LastIndex(address, ":")+1:]
}

func forEachTarget(t *testing.T, check func(t *testing.T, r *rendered, gpu bool)) {
	dirs, _ := filepath.Glob(filepath.Join("..", "overlays", "*"))
	for _, d := range dirs {
		name := "overlays/" + filepath.Base(d)
		if _, ok := targets[name]; !ok {
			t.Errorf("%s is not listed in targets (say whether it expects GPUs)", name)
		}
	}
	names := make([]string, 0, len(targets))
	for name := range targets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { check(t, load(t, name), targets[name].gpu) })
	}
}

func TestRendersAndDecodesStrictly(t *testing.T) {
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		kinds := map[string]int{}
		for _, o := range r.objects {
			kinds[fmt.Sprintf("%T", o)]++
		}
		t.Logf("%d objects: %v", len(r.objects), kinds)
		for _, want := range []string{"*v1.Deployment", "*v1.StatefulSet", "*v1.Service", "*v1.PodDisruptionBudget",
			"*v1.ConfigMap", "*v1.Secret"} {
			if kinds[want] == 0 {
				t.Errorf("no %s rendered", want)
			}
		}
	})
}

// Probes are native gRPC probes on the port the server listens on, asking grpc.health.v1 for
// the component's own service when deciding readiness.
func TestProbesAreGRPCHealthOnTheServingPort(t *testing.T) {
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		for _, w := range r.workloads {
			service, ok := grpcServices[w.component()]
			if !ok {
				t.Errorf("%s: unknown component %q", w, w.component())
				continue
			}
			for _, c := range w.template.Spec.Containers {
				grpcPort := containerPort(c, "grpc")
				listen := env(t, r, c)["LOOPWIRE_LISTEN"]
				if grpcPort == 0 || listen == "" || portOf(listen) != strconv.Itoa(int(grpcPort)) {
					t.Errorf("%s/%s: LOOPWIRE_LISTEN %q does not listen on the grpc container port %d",
						w, c.Name, listen, grpcPort)
				}
				probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe,
					"startup": c.StartupProbe}
				for kind, p := range probes {
					if p == nil {
						if kind != "startup" {
							t.Errorf("%s/%s: no %s probe", w, c.Name, kind)
						}
						continue
					}
					if p.GRPC == nil || p.HTTPGet != nil || p.TCPSocket != nil || p.Exec != nil {
						t.Errorf("%s/%s: %s probe is not a gRPC probe", w, c.Name, kind)
						continue
					}
					if p.GRPC.Port != grpcPort {
						t.Errorf("%s/%s: %s probe on port %d, the server listens on %d", w, c.Name, kind, p.GRPC.Port, grpcPort)
					}
				}
				if p := c.ReadinessProbe; p != nil && p.GRPC != nil && (p.GRPC.Service == nil || *p.GRPC.Service != service) {
					t.Errorf("%s/%s: readiness must ask grpc.health.v1 for %s", w, c.Name, service)
				}
			}
		}
	})
}

// SIGTERM starts the drain; the kubelet kills the pod terminationGracePeriodSeconds after it
// began stopping it (preStop included), so the grace period covers preStop + drain + exit.
func TestGracePeriodCoversTheDrainDeadline(t *testing.T) {
	drain := drainSeconds(t)
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		for _, w := range r.workloads {
			grace := ptrOr64(w.template.Spec.TerminationGracePeriodSeconds, 30)
			for _, c := range w.template.Spec.Containers {
				var preStop int64
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
					if c.Lifecycle.PreStop.Sleep == nil {
						t.Errorf("%s/%s: preStop must be a sleep (the image has no shell to rely on)", w, c.Name)
					} else {
						preStop = c.Lifecycle.PreStop.Sleep.Seconds
					}
				}
				if need := preStop + int64(drain) + exitMarginSeconds; grace < need {
					t.Errorf("%s/%s: terminationGracePeriodSeconds %d < preStop %d + drain %d + %d",
						w, c.Name, grace, preStop, drain, exitMarginSeconds)
				}
			}
		}
	})
}

func ptrOr64(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

// Each inference replica owns whole GPUs (requests equal to limits, as extended resources
// require); no other tier asks for any.
func TestGPURequests(t *testing.T) {
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		for _, w := range r.workloads {
			for _, c := range w.template.Spec.Containers {
				limit, hasLimit := c.Resources.Limits[gpuResource]
				request, hasRequest := c.Resources.Requests[gpuResource]
				if hasRequest && (!hasLimit || request.Cmp(limit) != 0) {
					t.Errorf("%s/%s: GPU request %s must equal its limit %s", w, c.Name, request.String(), limit.String())
				}
				wantGPU := gpu && w.component() == "inference"
				if wantGPU && (!hasLimit || limit.Value() < 1) {
					t.Errorf("%s/%s: inference needs %s >= 1 in limits", w, c.Name, gpuResource)
				}
				if !wantGPU && (hasLimit || hasRequest) {
					t.Errorf("%s/%s: asks for GPUs it does not use", w, c.Name)
				}
			}
			if wantGPU := gpu && w.component() == "inference"; wantGPU && w.kind != "StatefulSet" {
				t.Errorf("%s: inference must be a StatefulSet (stable replica names)", w)
			}
		}
	})
}

// Inference is discovered through a headless Service that lists ready replicas only, and the
// StatefulSet names it as its governing Service.
func TestInferenceHeadlessService(t *testing.T) {
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		for _, sts := range r.statefulSets {
			var governing *corev1.Service
			for _, s := range r.services {
				if s.Name == sts.Spec.ServiceName && s.Namespace == sts.Namespace {
					governing = s
				}
			}
			if governing == nil {
				t.Errorf("StatefulSet/%s: governing Service %q is not rendered", sts.Name, sts.Spec.ServiceName)
				continue
			}
			if governing.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("Service/%s: clusterIP %q, want None (headless)", governing.Name, governing.Spec.ClusterIP)
			}
			if governing.Spec.PublishNotReadyAddresses {
				t.Errorf("Service/%s: publishes replicas that are not ready", governing.Name)
			}
			if !selects(t, &metav1.LabelSelector{MatchLabels: governing.Spec.Selector}, sts.Spec.Template.Labels) {
				t.Errorf("Service/%s does not select StatefulSet/%s's pods", governing.Name, sts.Name)
			}
			checkGatewayDiscovery(t, r, governing, sts)
		}
	})
}

// The gateway finds the replicas through the headless Service's DNS name (or names them one by
// one), learns of a departing replica before it stops (discovery interval < its preStop) and
// moves the replica's streams before it is killed (drain timeout <= preStop + server drain).
func checkGatewayDiscovery(t *testing.T, r *rendered, headless *corev1.Service, sts *appsv1.StatefulSet) {
	t.Helper()
	var preStop int64
	if c := sts.Spec.Template.Spec.Containers[0]; c.Lifecycle != nil && c.Lifecycle.PreStop != nil &&
		c.Lifecycle.PreStop.Sleep != nil {
		preStop = c.Lifecycle.PreStop.Sleep.Seconds
	}
	port := strconv.Itoa(int(headless.Spec.Ports[0].Port))
	for _, w := range r.workloads {
		if w.component() != "gateway" {
			continue
		}
		e := env(t, r, w.template.Spec.Containers[0])
		target := e["LOOPWIRE_INFERENCE"]
		if name, ok := strings.CutPrefix(target, "dns:///"); ok {
			if name != headless.Name+":"+port {
				t.Errorf("%s: LOOPWIRE_INFERENCE %q, want dns:///%s:%s", w, target, headless.Name, port)
			}
			interval, err := strconv.ParseFloat(e["LOOPWIRE_DISCOVERY_INTERVAL"], 64)
			if err != nil || interval >= float64(preStop) {
				t.Errorf("%s: discovery interval %q must be set and shorter than the replicas' preStop %d s",
					w, e["LOOPWIRE_DISCOVERY_INTERVAL"], preStop)
			}
			drainTimeout, err := strconv.ParseFloat(e["LOOPWIRE_DRAIN_TIMEOUT"], 64)
			if err != nil || drainTimeout > float64(preStop)+float64(drainSeconds(t)) {
				t.Errorf("%s: drain timeout %q must be set and at most preStop %d + drain %d s",
					w, e["LOOPWIRE_DRAIN_TIMEOUT"], preStop, drainSeconds(t))
			}
			continue
		}
		for _, addr := range strings.Split(target, ",") {
			if !strings.HasSuffix(addr, "."+headless.Name+":"+port) {
				t.Errorf("%s: replica %q is not a StatefulSet name under Service %s port %s", w, addr, headless.Name, port)
			}
		}
	}
}

// Selectors: each workload selects its own template, each Service and each PodDisruptionBudget
// selects exactly one workload, and every workload with more than one replica has a budget
// that still lets a node drain proceed.
func TestSelectorsAndDisruptionBudgets(t *testing.T) {
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		selected := func(sel *metav1.LabelSelector, namespace string) []workload {
			var out []workload
			for _, w := range r.workloads {
				if w.namespace == namespace && selects(t, sel, w.template.Labels) {
					out = append(out, w)
				}
			}
			return out
		}
		for _, w := range r.workloads {
			if !selects(t, w.selector, w.template.Labels) {
				t.Errorf("%s: selector does not match its pod template", w)
			}
		}
		for _, s := range r.services {
			ws := selected(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, s.Namespace)
			if len(ws) != 1 {
				t.Errorf("Service/%s selects %d workloads, want 1", s.Name, len(ws))
				continue
			}
			for _, p := range s.Spec.Ports {
				if p.TargetPort.Type != intstr.String || containerPort(ws[0].template.Spec.Containers[0], p.TargetPort.StrVal) == 0 {
					t.Errorf("Service/%s: targetPort %s is not a named port of %s", s.Name, p.TargetPort.String(), ws[0])
				}
			}
		}
		covered := map[string]bool{}
		for _, pdb := range r.pdbs {
			ws := selected(pdb.Spec.Selector, pdb.Namespace)
			if len(ws) != 1 {
				t.Errorf("PodDisruptionBudget/%s selects %d workloads, want 1", pdb.Name, len(ws))
				continue
			}
			w := ws[0]
			covered[w.String()] = true
			switch {
			case pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable != nil:
				t.Errorf("PodDisruptionBudget/%s sets both minAvailable and maxUnavailable", pdb.Name)
			case pdb.Spec.MinAvailable != nil:
				if pdb.Spec.MinAvailable.Type != intstr.Int || pdb.Spec.MinAvailable.IntVal >= w.replicas {
					t.Errorf("PodDisruptionBudget/%s: minAvailable %s blocks every eviction of %d replicas",
						pdb.Name, pdb.Spec.MinAvailable.String(), w.replicas)
				}
			case pdb.Spec.MaxUnavailable != nil:
				if pdb.Spec.MaxUnavailable.Type != intstr.Int || pdb.Spec.MaxUnavailable.IntVal < 1 ||
					pdb.Spec.MaxUnavailable.IntVal >= w.replicas {
					t.Errorf("PodDisruptionBudget/%s: maxUnavailable %s out of 1..%d", pdb.Name,
						pdb.Spec.MaxUnavailable.String(), w.replicas-1)
				}
			default:
				t.Errorf("PodDisruptionBudget/%s sets neither minAvailable nor maxUnavailable", pdb.Name)
			}
		}
		for _, w := range r.workloads {
			if w.replicas > 1 && !covered[w.String()] {
				t.Errorf("%s: %d replicas and no PodDisruptionBudget", w, w.replicas)
			}
		}
	})
}

// Everything a pod refers to is rendered with it: ConfigMaps, Secrets, claims; the Ingress
// routes to a rendered Service port and takes its certificate from a TLS Secret.
func TestReferencesResolve(t *testing.T) {
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		for _, w := range r.workloads {
			for _, v := range w.template.Spec.Volumes {
				switch {
				case v.Secret != nil && r.secrets[v.Secret.SecretName] == nil:
					t.Errorf("%s: volume %s: Secret %s not rendered", w, v.Name, v.Secret.SecretName)
				case v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] == nil:
					t.Errorf("%s: volume %s: ConfigMap %s not rendered", w, v.Name, v.ConfigMap.Name)
				case v.PersistentVolumeClaim != nil && r.pvcs[v.PersistentVolumeClaim.ClaimName] == nil:
					t.Errorf("%s: volume %s: claim %s not rendered", w, v.Name, v.PersistentVolumeClaim.ClaimName)
				}
			}
			for _, c := range w.template.Spec.Containers {
				for _, m := range c.VolumeMounts {
					if !slices.ContainsFunc(w.template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
						t.Errorf("%s/%s: mounts volume %s that the pod does not have", w, c.Name, m.Name)
					}
				}
				for _, from := range c.EnvFrom {
					if from.ConfigMapRef != nil && r.configMaps[from.ConfigMapRef.Name] == nil {
						t.Errorf("%s/%s: envFrom ConfigMap %s not rendered", w, c.Name, from.ConfigMapRef.Name)
					}
					if from.SecretRef != nil && r.secrets[from.SecretRef.Name] == nil {
						t.Errorf("%s/%s: envFrom Secret %s not rendered", w, c.Name, from.SecretRef.Name)
					}
				}
			}
		}
		for _, ing := range r.ingresses {
			for _, tls := range ing.Spec.TLS {
				if s := r.secrets[tls.SecretName]; s == nil || s.Type != corev1.SecretTypeTLS {
					t.Errorf("Ingress/%s: TLS secret %s is not a rendered kubernetes.io/tls Secret", ing.Name, tls.SecretName)
				}
			}
			for _, rule := range ing.Spec.Rules {
				for _, p := range rule.HTTP.Paths {
					b := p.Backend.Service
					ok := slices.ContainsFunc(r.services, func(s *corev1.Service) bool {
						return s.Name == b.Name && slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool {
							return sp.Name == b.Port.Name && b.Port.Name != "" || sp.Port == b.Port.Number && b.Port.Number != 0
						})
					})
					if !ok {
						t.Errorf("Ingress/%s: backend %s:%s%d is not a rendered Service port", ing.Name, b.Name,
							b.Port.Name, b.Port.Number)
					}
				}
			}
		}
	})
}

// Observability: every pod exports traces to the OTel endpoint and is scraped by Prometheus
// on the port the service serves metrics on, bound to the pod address.
func TestTelemetryWiring(t *testing.T) {
	forEachTarget(t, func(t *testing.T, r *rendered, gpu bool) {
		for _, w := range r.workloads {
			ann := w.template.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s: pod template lacks prometheus.io/scrape=true and path=/metrics", w)
			}
			for _, c := range w.template.Spec.Containers {
				e := env(t, r, c)
				if !strings.HasPrefix(e["OTEL_EXPORTER_OTLP_ENDPOINT"], "http") {
					t.Errorf("%s/%s: no OTEL_EXPORTER_OTLP_ENDPOINT", w, c.Name)
				}
				metrics := containerPort(c, "metrics")
				if metrics == 0 || e["LOOPWIRE_METRICS_PORT"] != strconv.Itoa(int(metrics)) ||
					ann["prometheus.io/port"] != strconv.Itoa(int(metrics)) {
					t.Errorf("%s/%s: LOOPWIRE_METRICS_PORT %q, metrics container port %d and prometheus.io/port %q differ",
						w, c.Name, e["LOOPWIRE_METRICS_PORT"], metrics, ann["prometheus.io/port"])
				}
				if h := e["LOOPWIRE_METRICS_HOST"]; h != "0.0.0.0" && h != "::" {
					t.Errorf("%s/%s: metrics bound to %q, which Prometheus cannot reach", w, c.Name, h)
				}
			}
		}
	})
}
