"""The reference proxies' configurations, as the benchmarks run them and as BENCHMARKS.md
shows them: one place, so that the document prints exactly what ran."""

HAPROXY_CFG = """global
  maxconn {maxconn}
  nbthread {threads}
defaults
  mode {mode}
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  server s1 127.0.0.1:{upstream}
"""

NGINX_CFG = """daemon off;
master_process on;
user root;
worker_processes {threads};
worker_rlimit_nofile {nofile};
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{
  worker_connections {connections};
}}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  upstream up {{
    server 127.0.0.1:{upstream};
    keepalive 512;
    keepalive_requests 10000000;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""
