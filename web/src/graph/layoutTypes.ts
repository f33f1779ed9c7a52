// Messages between the page and the layout worker.

export interface LayoutRequest {
  id: number;
  nodes: { id: string; width: number; height: number }[];
  edges: { from: string; to: string }[];
}

export interface PlacedNode {
  id: string;
  // Centre, as dagre places it.
  x: number;
  y: number;
  width: number;
  height: number;
  // Time the worker spent laying out, for the bench.
  workerMs?: number;
}

export interface PlacedEdge {
  from: string;
  to: string;
  points: { x: number; y: number }[];
}

export interface LayoutResult {
  id: number;
  nodes: PlacedNode[];
  edges: PlacedEdge[];
  width: number;
  height: number;
  // Time the worker spent laying out, for the bench.
  workerMs?: number;
}
