{{/* The chart's name, cut to the 63 characters of a DNS label. */}}
{{- define "smartfeed.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name: the release name, or release-chart when they differ. */}}
{{- define "smartfeed.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The components, each a Deployment running `smartfeed <name>`. */}}
{{- define "smartfeed.components" -}}
worker generator feedsvc graph
{{- end -}}

{{- define "smartfeed.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "smartfeed.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: smartfeed
{{- end -}}

{{/* selector labels of one component: call with (dict "root" $ "component" "worker"). */}}
{{- define "smartfeed.selectorLabels" -}}
app.kubernetes.io/name: {{ include "smartfeed.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "smartfeed.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The config file shared by every component (see docs/operations.md). */}}
{{- define "smartfeed.config" -}}
{{- if ne .Values.storage.backend "hbase" -}}
{{- fail "storage.backend must be hbase: the worker, generator, feedsvc and graph Deployments share their storage (Pebble is embedded in one process; use `smartfeed all` for it)" -}}
{{- end -}}
{{- $h := .Values.storage.hbase -}}
{{- if not (and $h.poolsZK $h.primaryZK $h.standbyZK) -}}
{{- fail "storage.hbase.poolsZK, primaryZK and standbyZK are all required" -}}
{{- end -}}
{{- $cfg := dict
  "storage" (dict "backend" "hbase" "hbase" (dict "pools_zk" $h.poolsZK "primary_zk" $h.primaryZK "standby_zk" $h.standbyZK "table_prefix" $h.tablePrefix "zookeeper_root" $h.zookeeperRoot))
  "redis" (dict "mode" (.Values.redis.mode | default "single") "addr" .Values.redis.addr "sentinel_master" .Values.redis.sentinelMaster "sentinel_addrs" .Values.redis.sentinelAddrs "cluster_addrs" .Values.redis.clusterAddrs "username" .Values.redis.username "db" (int .Values.redis.db) "namespace" .Values.redis.namespace)
  "grpc" (dict "addr" (printf ":%d" (int .Values.ports.grpc)))
  "admin" (include "smartfeed.adminConfig" . | fromJson)
  "auth" (include "smartfeed.authConfig" . | fromJson)
  "generator" (dict "token_file" (ternary "/etc/smartfeed-auth/generator-token" "" (ne .Values.auth.existingSecret "")) "ca_file" (ternary "/etc/smartfeed-tls/ca.crt" "" (ne .Values.tls.existingSecret "")))
  "tls" (include "smartfeed.tlsConfig" . | fromJson)
  "log" (dict "level" .Values.log.level "format" .Values.log.format)
  "worker" (dict "concurrency" (int .Values.worker.concurrency) "shutdown_timeout" .Values.worker.shutdownTimeout)
  "feed" (dict "generator_deadline" .Values.feed.generatorDeadline "max_items" (int .Values.feed.maxItems) "faults" .Values.feed.faults
      "hedge" (dict "mode" .Values.hedge.mode "delay" .Values.hedge.delay "percentile" (float64 .Values.hedge.percentile) "min" .Values.hedge.min "max" .Values.hedge.max "budget" (float64 .Values.hedge.budget) "warmup" (float64 .Values.hedge.warmup)))
  "shutdown_timeout" .Values.shutdownTimeout
-}}
{{- toPrettyJson $cfg -}}
{{- end -}}


{{/* The admin plane: metrics on the pod network for Prometheus, FeedAdmin on loopback. */}}
{{- define "smartfeed.adminConfig" -}}
{{- $a := dict "addr" (printf "%s:%d" .Values.adminBind (int .Values.ports.admin)) "grpc_addr" "127.0.0.1:9092" -}}
{{- if .Values.auth.existingSecret -}}
{{- $_ := set $a "token_file" "/etc/smartfeed-auth/admin-token" -}}
{{- end -}}
{{- toJson $a -}}
{{- end -}}

{{- define "smartfeed.authConfig" -}}
{{- if and (not .Values.auth.existingSecret) (not .Values.auth.insecure) -}}
{{- fail "auth.existingSecret is required (a Secret with jwks.json, admin-token and generator-token), or set auth.insecure=true to serve without authentication on a private network" -}}
{{- end -}}
{{- $a := dict "issuer" .Values.auth.issuer "audience" .Values.auth.audience "insecure" .Values.auth.insecure -}}
{{- if .Values.auth.existingSecret -}}
{{- $_ := set $a "jwks_file" "/etc/smartfeed-auth/jwks.json" -}}
{{- end -}}
{{- toJson $a -}}
{{- end -}}

{{- define "smartfeed.tlsConfig" -}}
{{- if and (not .Values.tls.existingSecret) (not .Values.auth.insecure) -}}
{{- fail "tls.existingSecret is required (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt), or set auth.insecure=true to serve in clear on a private network" -}}
{{- end -}}
{{- $t := dict -}}
{{- if .Values.tls.existingSecret -}}
{{- $_ := set $t "cert_file" "/etc/smartfeed-tls/tls.crt" -}}
{{- $_ := set $t "key_file" "/etc/smartfeed-tls/tls.key" -}}
{{- if .Values.tls.mutual -}}
{{- $_ := set $t "client_ca_file" "/etc/smartfeed-tls/ca.crt" -}}
{{- end -}}
{{- end -}}
{{- toJson $t -}}
{{- end -}}
