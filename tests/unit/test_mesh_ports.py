"""The ports a mesh hands its services are distinct and free (a repeated port let the api's health
check reach a gRPC server and fail the whole module)."""

import socket

from loopwire.mesh import free_ports


def test_the_ports_of_one_mesh_are_distinct_and_bindable():
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
