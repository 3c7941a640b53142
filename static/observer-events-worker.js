// One /events stream shared by every observer tab of this browser: each tab
// connects a port, and the worker relays the stream's events to all ports.
'use strict';

var ports = [];
var source = null;
var state = 'connecting';
var eventTypes = ['snapshot', 'message.created', 'group.changed', 'group.deleted', 'member.changed', 'wakeup.changed', 'tool_call.completed'];

function send(port, message) {
  try { port.postMessage(message); return true; } catch (e) { return false; }
}

function broadcast(message) {
  ports = ports.filter(function (port) { return send(port, message); });
}

function setState(next) {
  state = next;
  broadcast({ type: 'status', data: next });
}

function start() {
  if (source) return;
  source = new EventSource('/events');
  source.onopen = function () { setState('open'); };
  source.onerror = function () { setState('error'); };
  eventTypes.forEach(function (type) {
    source.addEventListener(type, function (event) {
      if (state !== 'open') setState('open');
      broadcast({ type: type, data: event.data });
    });
  });
}

function stopIfUnused() {
  if (ports.length || !source) return;
  source.close();
  source = null;
  state = 'connecting';
}

self.onconnect = function (event) {
  var port = event.ports[0];
  ports.push(port);
  port.onmessage = function (message) {
    var command = message.data && message.data.command;
    if (command === 'bye') {
      ports = ports.filter(function (item) { return item !== port; });
      stopIfUnused();
    }
  };
  port.start();
  start();
  send(port, { type: 'status', data: state });
};
