"""A loopback OTLP/HTTP receiver for crates/cli/tests/otlp.rs.

Serves POST /v1/traces and /v1/metrics on 127.0.0.1 (port 0: the kernel picks one, printed
as the first stdout line, `listening PORT`). Trace bodies are decoded with the official
`opentelemetry-proto` package as `ExportTraceServiceRequest`; every span is written to
OUT as one JSON line. Metric bodies are decoded as `ExportMetricsServiceRequest`; each
metric's name and attribute sets go to OUT as `{"metric": ...}` lines. Anything it cannot
decode is answered 400, so a malformed export fails the test.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

OUT = sys.argv[1]
KINDS = {value: name for name, value in trace_pb2.Span.SpanKind.items()}


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in any_value.array_value.values]
    if kind is None:
        return None
    return getattr(any_value, kind)


def attributes(items):
    return {item.key: value_of(item.value) for item in items}


def span_json(resource, scope, span):
    return {
        "service": resource.get("service.name"),
        "scope": scope.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "name": span.name,
        "kind": KINDS.get(span.kind, str(span.kind)),
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "attributes": attributes(span.attributes),
        "events": [
            {"name": event.name, "time": event.time_unix_nano, "attributes": attributes(event.attributes)}
            for event in span.events
        ],
        "links": [
            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()} for link in span.links
        ],
        "status": {"code": span.status.code, "message": span.status.message},
    }


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        lines = []
        try:
            if self.path == "/v1/traces":
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    resource = attributes(resource_spans.resource.attributes)
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            lines.append(span_json(resource, scope_spans.scope, span))
                answer = trace_service_pb2.ExportTraceServiceResponse()
            elif self.path == "/v1/metrics":
                request = metrics_service_pb2.ExportMetricsServiceRequest()
                request.ParseFromString(body)
                for resource_metrics in request.resource_metrics:
                    for scope_metrics in resource_metrics.scope_metrics:
                        for metric in scope_metrics.metrics:
                            kind = metric.WhichOneof("data")
                            points = getattr(metric, kind).data_points if kind else []
                            lines.append({
                                "metric": metric.name,
                                "unit": metric.unit,
                                "kind": kind,
                                "points": [
                                    {"attributes": attributes(point.attributes), "count": getattr(point, "count", None)}
                                    for point in points
                                ],
                            })
                answer = metrics_service_pb2.ExportMetricsServiceResponse()
            else:
                self.send_error(404)
                return
        except Exception as error:  # a body the official decoder refuses fails the export
            self.send_error(400, str(error))
            return
        with open(OUT, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line) + "\n")
        payload = answer.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
